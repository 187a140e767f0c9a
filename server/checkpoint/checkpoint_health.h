// What an operator must see of a server's checkpoints. A checkpoint that fails does not
// stop training (the previous ones stay as they were), so a full, read-only or failing
// disk would otherwise show in one log line while the job runs on for hours with nothing
// to resume from. This counts the failures and the unreadable files passed over, and
// knows the newest good checkpoint's version and age on the injected clock; /metrics
// (omnilearn_checkpoint_*), the status (CheckpointHealth in proto/) and a sharded job's
// coordinator (for every shard) read it. Pure: no gRPC, no files. Thread-safe.
#ifndef OMNILEARN_SERVER_CHECKPOINT_CHECKPOINT_HEALTH_H_
#define OMNILEARN_SERVER_CHECKPOINT_CHECKPOINT_HEALTH_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace omnilearn {
namespace server {

// One server's checkpoints at one moment.
struct CheckpointHealthView {
  bool in_memory = false;       // no --checkpoint_dir: kept in memory (a restart keeps nothing)
  uint64_t newest_version = 0;  // of the newest good checkpoint; 0: none written yet
  // Since the newest good checkpoint was written (since the server started while none was).
  absl::Duration newest_age = absl::ZeroDuration();
  uint64_t failures = 0;         // checkpoints that could not be written
  std::string last_error;        // the newest attempt's error; "" when it succeeded
  uint64_t corrupt_skipped = 0;  // unreadable checkpoint files passed over for older ones
  bool failing() const { return !last_error.empty(); }
};

// The view's age after `elapsed` more (a view reported earlier, read now).
CheckpointHealthView Aged(CheckpointHealthView view, absl::Duration elapsed);
// "v120 4s ago", "FAILING (3): <error>; v120 58s ago", "none yet", "+ 2 corrupt skipped".
std::string DescribeCheckpoints(const CheckpointHealthView& view);

class CheckpointHealth {
 public:
  // `clock` must outlive this; the age counts from construction until a checkpoint is
  // written.
  CheckpointHealth(const Clock* clock, bool in_memory);

  void Written(uint64_t version) ABSL_LOCKS_EXCLUDED(mu_);
  // The checkpoint a restarted server resumed from, written at `written_at` (this clock's
  // time): the newest good one until the next is written.
  void Resumed(uint64_t version, absl::Time written_at) ABSL_LOCKS_EXCLUDED(mu_);
  void Failed(const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);
  // An unreadable (corrupt or half-written) checkpoint was passed over for an older one.
  void SkippedCorrupt() ABSL_LOCKS_EXCLUDED(mu_);
  CheckpointHealthView View() const ABSL_LOCKS_EXCLUDED(mu_);

  // omnilearn_checkpoint_failures_total, _corrupt_skipped_total, _failing (1 while the
  // newest attempt failed), _age_seconds (read at each scrape) and _newest_version in
  // `registry`, which must not outlive this.
  void ExportMetrics(metrics::Registry& registry);

 private:
  const Clock* const clock_;
  const bool in_memory_;
  mutable absl::Mutex mu_;
  absl::Time newest_at_ ABSL_GUARDED_BY(mu_);
  uint64_t newest_version_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  uint64_t corrupt_skipped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CHECKPOINT_CHECKPOINT_HEALTH_H_
