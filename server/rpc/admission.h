// What callers may hold of the server at once, on the injected clock (no gRPC here):
//   - a worker session has at most one push in flight (its upload slot), and one slice sent
//     again beside it (its resend slot), so the memory of in-flight gradients is at most one
//     model per live worker, two for a worker that lost a connection under a push;
//   - at most `max_join_uploads` joins upload a model at once (the others wait their turn
//     until their deadline);
//   - a client stream that sent nothing for `stream_idle_timeout` while it is watched is
//     cancelled, so stalled or slow streams give their thread back.
// The service asks; these rules answer. Thread-safe.
#ifndef OMNILEARN_SERVER_RPC_ADMISSION_H_
#define OMNILEARN_SERVER_RPC_ADMISSION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/worker_id.h"

namespace omnilearn {
namespace server {

struct ServiceLimits {
  absl::Duration stream_idle_timeout = absl::Seconds(60);
  int max_join_uploads = 2;
};

class Admission {
 public:
  using StreamId = uint64_t;

  // `clock` must outlive this.
  Admission(const Clock* clock, ServiceLimits limits) : clock_(clock), limits_(limits) {}

  // A session's upload slot, or with `resend` its resend slot (PushHeader.resend: a slice
  // sent again after its worker lost the first sending's connection), beside the upload
  // slot: the server may not have noticed yet that the first sending's connection is gone.
  // False when worker `id` holds that slot already. EndUpload frees the slot Begin took.
  bool BeginUpload(WorkerId id, bool resend = false);
  void EndUpload(WorkerId id, bool resend = false);
  bool UploadInFlight(WorkerId id) const;  // either slot

  // Waits (in the clock's time) for a join upload slot until `deadline`; false when none
  // came. Each true is matched by one EndJoinUpload.
  bool BeginJoinUpload(absl::Time deadline);
  void EndJoinUpload();

  // Starts watching a stream: `cancel` runs once when Touch was not called for the idle
  // timeout. Watched until Unwatch (a stream the core works on, a join at the start
  // barrier or a push in its round, is not idle and is not watched then).
  StreamId Watch(std::function<void()> cancel);
  void Touch(StreamId stream);
  void Unwatch(StreamId stream);  // a stream no longer watched: nothing
  size_t watched() const;

  // Runs the cancels of streams whose idle deadline passed, as that time comes on the
  // clock, until Stop. A cancel runs under this object's lock, so it never runs after its
  // stream's Unwatch returned; it must not call back into this object.
  void CancelIdleStreamsUntilStopped();
  void Stop();

 private:
  struct Watched {
    absl::Time deadline;
    std::function<void()> cancel;
  };
  const Clock* const clock_;
  const ServiceLimits limits_;
  mutable absl::Mutex mu_;
  std::set<WorkerId> uploading_ ABSL_GUARDED_BY(mu_);
  std::set<WorkerId> resending_ ABSL_GUARDED_BY(mu_);
  int join_uploads_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<StreamId, Watched> watched_ ABSL_GUARDED_BY(mu_);
  StreamId next_stream_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_ADMISSION_H_
