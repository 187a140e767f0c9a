// Where a worker's iterations go: with OMNILEARN_TIMELINE=PATH in its environment, a worker
// (the C++ one, or a Python one on the same core) appends one JSON line per iteration to PATH:
// the push's number in the session, when it began (Unix ms), then each event in milliseconds from then, with the
// slice it concerns in a sharded job (-1: none or the whole model), and the totals of the
// waits it added up. The events:
//   begin        the push was opened (before the forward pass; a Python worker's push_pull,
//                which sends a gradient whole after its step, opens it then: its line begins
//                the step's compute time earlier, and its `finish` is at that time)
//   bucket       a bucket of gradient left during backward
//   finish       the step's end: backward is over, the rest of the gradient and the trailer go
//   written      a push stream's last byte was handed to gRPC (per slice in a sharded job)
//   slice_reply  a slice's reply came (a sharded job)
//   reply        the push's reply is in: the next step may begin
//   model_in     a model stream's last value arrived (per slice in a sharded job)
// and the total `forward_wait`: how long the next forward waited for tensors still arriving.
// Every process on one machine reads one wall clock, so the lines of the workers and the
// emulated cluster's hosts line up. Off (nothing recorded, one branch per event) when unset.
#ifndef OMNILEARN_WORKER_CLIENT_TIMELINE_H_
#define OMNILEARN_WORKER_CLIENT_TIMELINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace omnilearn {
namespace worker {

// Thread-safe: events come from the training thread and the streams' threads.
class Timeline {
 public:
  // Records on `clock` (not owned) and hands each finished line to `write`.
  Timeline(const Clock* clock, std::function<void(const std::string&)> write);
  ~Timeline();

  // The process's timeline: appends to $OMNILEARN_TIMELINE, or records nothing when it is
  // unset or cannot be opened (said once on stderr).
  static Timeline& Process();

  bool enabled() const { return static_cast<bool>(write_); }
  // Starts iteration `iteration`'s record (its `begin` event); the previous one is written.
  // A push opened after its step (sent whole: a Python worker's push_pull) begins the
  // step's `computed` time before now, when its forward began.
  void Begin(uint64_t iteration, absl::Duration computed = absl::ZeroDuration());
  // An event of the iteration begun last, now (nothing before the first Begin).
  void Mark(absl::string_view event, int slice = -1);
  // Adds `d` to the iteration's total named `name`.
  void Add(absl::string_view name, absl::Duration d);
  // Runs `f`, adding how long it took to the total `name` when recording.
  template <typename F>
  void Time(absl::string_view name, F f) {
    if (!enabled()) return f();
    const absl::Time start = clock_->Now();
    f();
    Add(name, clock_->Now() - start);
  }
  // Writes the iteration recorded so far (the destructor does too).
  void Flush();

 private:
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const std::function<void(const std::string&)> write_;
  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t iteration_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time start_ ABSL_GUARDED_BY(mu_);
  struct Event {
    std::string name;
    double ms;
    int slice;
  };
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, double> totals_ ABSL_GUARDED_BY(mu_);  // ms
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_TIMELINE_H_
