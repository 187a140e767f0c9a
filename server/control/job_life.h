// The job's life on a daemon: the start barrier (how many workers it waits for, until
// when), whether training has started, the finish (every worker left, one at least having completed its training) and
// the job counter across --reset_when_done. Thread-compatible: the core calls it under its mutex.
#ifndef OMNILEARN_SERVER_CONTROL_JOB_LIFE_H_
#define OMNILEARN_SERVER_CONTROL_JOB_LIFE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace omnilearn {
namespace server {

class JobLife {
 public:
  // A job starting at `start` whose barrier waits for `num_workers`, for `start_timeout`.
  JobLife(absl::Time start, int num_workers, absl::Duration start_timeout)
      : num_workers_(num_workers),
        start_timeout_(start_timeout),
        expected_(num_workers),
        start_by_(start + start_timeout) {}

  uint64_t number() const { return number_; }  // 1 for the daemon's first job
  // The barrier: training starts once this many workers are live, or at start_by().
  int expected() const { return expected_; }
  absl::Time start_by() const { return start_by_; }
  // Training has started: every expected worker joined, or the barrier's time passed.
  bool started() const { return started_; }
  void Start() { started_ = true; }
  // The job went back to a checkpoint at `now` and every session ended: training starts
  // again once the `live` workers of that moment joined again, or after `timeout`. Before
  // training started (a restarted coordinator, or a rollback before everyone was back)
  // the barrier already waiting is kept.
  void Regather(absl::Time now, int live, absl::Duration timeout);

  // A worker left; `completed`: it finished its training (not a crash or a Ctrl-C).
  void NoteLeft(bool completed) { any_completed_ = any_completed_ || completed; }
  // Ends the job when every worker has left (`all_left`: none live, none dropped) and
  // one at least completed its training. True when this call ended it.
  bool MaybeFinish(bool all_left);
  bool finished() const { return finished_; }

  // The next job begins at `now`: numbered one more, not started (its barrier waits for
  // num_workers again), not finished.
  void Next(absl::Time now);

 private:
  const int num_workers_;
  const absl::Duration start_timeout_;
  uint64_t number_ = 1;
  int expected_;
  absl::Time start_by_;
  bool started_ = false;
  bool any_completed_ = false;
  bool finished_ = false;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_JOB_LIFE_H_
