// The job's life on a daemon: the start barrier's clock, whether training has started,
// the finish (every worker left, one at least having completed its training) and the job
// counter across --reset_when_done. Thread-compatible: the core calls it under its mutex.
#ifndef OMNILEARN_SERVER_JOB_LIFE_H_
#define OMNILEARN_SERVER_JOB_LIFE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace omnilearn {
namespace server {

class JobLife {
 public:
  explicit JobLife(absl::Time start) : start_(start) {}

  uint64_t number() const { return number_; }  // 1 for the daemon's first job
  absl::Time start() const { return start_; }
  // Training has started: every expected worker joined, or the start timeout passed.
  bool started() const { return started_; }
  void Start() { started_ = true; }

  // A worker left; `completed`: it finished its training (not a crash or a Ctrl-C).
  void NoteLeft(bool completed) { any_completed_ = any_completed_ || completed; }
  // Ends the job when every worker has left (`all_left`: none live, none dropped) and
  // one at least completed its training. True when this call ended it.
  bool MaybeFinish(bool all_left);
  bool finished() const { return finished_; }

  // A join while the job is finished: FailedPrecondition (naming the model's `version` and
  // the `samples` trained), unless `reset_when_done` lets the next job begin (Next).
  absl::Status CheckJoinable(bool reset_when_done, uint64_t version, uint64_t samples) const;
  // The next job begins at `now`: numbered one more, not started, not finished.
  void Next(absl::Time now);

 private:
  uint64_t number_ = 1;
  absl::Time start_;
  bool started_ = false;
  bool any_completed_ = false;
  bool finished_ = false;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_JOB_LIFE_H_
