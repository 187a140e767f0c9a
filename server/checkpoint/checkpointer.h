// Takes a server's checkpoints on a timer read from the core's clock. The state is
// captured under the core's lock without a copy (weights and optimizer state shared);
// the file is written outside it, so pushes are not stalled by the disk. A sharded job's
// coordinator also goes back to one of them through it (GoBack), so that a rollback
// and a checkpoint being written never interleave.
#ifndef OMNILEARN_SERVER_CHECKPOINT_CHECKPOINTER_H_
#define OMNILEARN_SERVER_CHECKPOINT_CHECKPOINTER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/checkpoint_health.h"
#include "server/control/parameter_server_core.h"

namespace omnilearn {
namespace server {

// Thread-safe: the server's monitor, its shutdown and a sharded job's recovery call it.
class Checkpointer {
 public:
  // `core` must outlive this. `every` > 0. `complete` (when given) adds to each captured
  // state what the core does not know (a sharded job's whole layout). `health` (when
  // given, outliving this) is told each checkpoint written or failed and each unreadable
  // one passed over.
  Checkpointer(ParameterServerCore* core, std::unique_ptr<const CheckpointStore> store, absl::Duration every,
               std::function<void(CheckpointState*)> complete = nullptr, CheckpointHealth* health = nullptr);

  // Writes a checkpoint when `every` has passed since the last one (or since
  // construction) and the store holds none of the model's version yet. Returns the
  // path written, or "" when none was due (or the store is memory). Errors from writing (the previous checkpoints
  // stay as they were).
  absl::StatusOr<std::string> MaybeCheckpoint() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes one now unless the store holds the model's version already ("" then; a
  // rollback drops the newer ones, which are written again). The first checkpoint of a
  // new job on the same daemon (--reset_when_done) moves the previous job's checkpoints
  // aside first, so they neither shadow nor replace the new ones.
  absl::StatusOr<std::string> CheckpointNow() ABSL_LOCKS_EXCLUDED(mu_);

  // A sharded job's recovery (CoordinatorShards::Recover): given the versions each shard
  // holds ([i] for slice i; [0] unused), rolls the core back to the newest checkpoint
  // held here and by every shard (an unreadable one is skipped for the one before),
  // deletes the newer ones (a history undone) and returns its version.
  // FailedPrecondition, naming what every server holds, when there is none.
  absl::StatusOr<uint64_t> GoBack(const std::vector<std::vector<uint64_t>>& held) ABSL_LOCKS_EXCLUDED(mu_);

  // Told of each checkpoint written, after the write (before the first checkpoint; null: nobody).
  void OnWritten(std::function<void(const CheckpointState&)> written) { written_ = std::move(written); }
  // Keeps `state`, a checkpoint of this server's that another server held (a replica), as
  // if this server had written it. The store's errors.
  absl::Status Keep(const CheckpointState& state) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ParameterServerCore* const core_;
  const std::unique_ptr<const CheckpointStore> store_;
  const absl::Duration every_;
  const std::function<void(CheckpointState*)> complete_;
  CheckpointHealth* const health_;  // may be null
  std::function<void(const CheckpointState&)> written_;
  // The checkpoint itself (CheckpointNow under mu_).
  absl::StatusOr<std::string> Write() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;  // one checkpoint or rollback at a time
  absl::Time last_ ABSL_GUARDED_BY(mu_);
  uint64_t last_job_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CHECKPOINT_CHECKPOINTER_H_
