// A shard server's side of the coordinator's commands (docs/SHARDING.md), without a
// network: each command range-checked (CheckShardCommand), then applied to the shard's
// data plane in the stream's order: an init and its chunks (the slice's first values) or
// a restore from the slice's checkpoint, sessions, steps, checkpoints. ShardLink feeds it
// from the Shard call; tests and the shard-plane fuzzer feed it directly.
#ifndef OMNILEARN_SERVER_RPC_SHARD_APPLY_H_
#define OMNILEARN_SERVER_RPC_SHARD_APPLY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_layout.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.pb.h"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/checkpoint_health.h"
#include "server/data/shard_core.h"

namespace omnilearn {
namespace server {

// A clipped job's norm reduction (ServerPeers.StepNorm): this slice's part in, the whole
// model's squared norm out.
using StepNormCall = std::function<absl::StatusOr<double>(const v1::ShardNorm& part)>;
// A shard's checkpoints to its coordinator (ServerPeers.ReportCheckpoints).
using ReportCheckpointsCall = std::function<absl::Status(const v1::ShardCheckpoints& report)>;
// A slice's checkpoint (its `slice` set) to the server at `to`, kept there as its replica
// (ServerPeers.KeepReplica): sent off the caller's thread, so it returns at once.
using KeepReplicaCall = std::function<void(const std::string& to, const CheckpointState& state, uint64_t fingerprint)>;
// Slice `index`'s replica of `version` of map `fingerprint` that the server at `from`
// keeps (ServerPeers.FetchReplica), read back.
using FetchReplicaCall = std::function<absl::StatusOr<CheckpointState>(const std::string& from, int index,
                                                                       uint64_t version, uint64_t fingerprint)>;

struct ShardApplierOptions {
  int shards = 2;               // the job's, as this shard was started
  int64_t partition_bytes = 0;  // the job's partitions
  int index = 0;                // the slice asked for (0 = any)
  // The slice's checkpoints, at the versions the coordinator names (empty: the newest
  // checkpoint_keep in memory, which a partition survives and a restart does not).
  std::string checkpoint_dir;
  int checkpoint_keep = 3;
  std::function<void(const std::string&)> log;  // null = silent
  StepNormCall step_norm;                       // null: an init that clips is refused
  // Told of each checkpoint written or failed and each unreadable one passed over (null:
  // nobody); after each checkpoint, the coordinator is told through report_checkpoints
  // (null: it is not).
  CheckpointHealth* health = nullptr;
  ReportCheckpointsCall report_checkpoints;
  // Null: a checkpoint's replica is not sent, and a restore from a replica is refused.
  KeepReplicaCall keep_replica;
  FetchReplicaCall fetch_replica;
};

// Not thread-safe: one control stream's thread uses it (OpenAhead excepted).
class ShardApplier {
 public:
  ShardApplier(ShardApplierOptions options, ShardCore* shard);
  // Creates the checkpoint directory (and clears a crash's partial files) and reads which
  // slice its newest checkpoint holds.
  absl::Status Prepare();
  // A new registration's stream begins: an init whose values were not all received is
  // forgotten.
  void Restart();
  // The registration's stream ended (the job ended, or the link broke) while commands may
  // still be applied: their checkpoints are no longer reported to the coordinator (the next
  // registration names them), and a report in flight that fails is not logged.
  void StreamEnded() { stream_open_ = false; }
  // Applies one command. An error means the stream cannot go on: InvalidArgument for a
  // field out of range or out of order (a chunk without an init), FailedPrecondition for
  // a map that is not this shard's or a restore it cannot read; Aborted for another slice
  // than the one this shard holds (or was started for), a step or checkpoint of a version
  // the slice is not at, or a checkpoint whose step history (sync) differs from the
  // coordinator's: it registers again, asking for its own slice, and the job goes back to
  // its common checkpoint. A checkpoint it cannot write is not one: the slice goes on (its
  // previous checkpoints stay), the failure is logged, counted and reported.
  absl::Status Apply(const v1::ShardCommand& command);
  // A session's opening may be applied ahead of the commands before it when no init (or its
  // values: a restore, a new job) is among them (each MayBePassed: sessions, steps, rounds ahead,
  // checkpoints): it only lets the session's calls in, and no step ahead of it can name a
  // session opened after it. A step can wait member_wait for a missing member's slice; a
  // worker that joined meanwhile would be refused NotFound here after kAnnouncementWait
  // and join again, and again, until the step ended.
  static bool IsOpening(const v1::ShardCommand& command);
  static bool MayBePassed(const v1::ShardCommand& command);
  // Applies an opening ahead of its place (Apply applies it again there). Safe to call
  // while another thread is in Apply: it touches the shard's data plane only.
  absl::Status OpenAhead(const v1::ShardCommand& opening);
  // The fingerprint of the map this shard holds a slice of (0 before its first init).
  uint64_t fingerprint() const { return fingerprint_; }
  // The slice a registration asks for: the one held, else the one this shard was started
  // for, else the one its newest checkpoint on disk holds (0: any).
  int slice_asked() const {
    return held_index_ != 0 ? held_index_ : options_.index != 0 ? options_.index : disk_index_;
  }
  // The versions of the slice's checkpoints.
  std::vector<uint64_t> CheckpointVersions() const;

 private:
  // An init whose chunks are still coming: its slice layout outlives the assembler.
  struct PendingInit {
    v1::ShardInit init;
    ModelLayout slice;
    OptimizerOptions optimizer;
    uint64_t fingerprint = 0;
    std::optional<ChunkAssembler> values;
  };
  absl::Status ApplyInit(const v1::ShardInit& init);
  absl::Status ApplyChunk(const v1::TensorChunk& chunk);
  absl::Status FinishInit();  // the pending init's values are complete
  absl::Status ApplyRestore(const PendingInit& p);
  // The restore's checkpoint: this shard's own, or the replica another server keeps (then
  // kept as this shard's own too).
  absl::StatusOr<CheckpointState> RestoreFrom(const PendingInit& p);
  absl::Status ApplyCheckpoint(const v1::ShardCheckpoint& checkpoint);
  // What the checkpoint's write did, to the log, the health and the coordinator.
  void Report(const absl::StatusOr<std::string>& written, uint64_t version);
  // An init of a later job than the slice held (--reset_when_done): the last job's sessions
  // and pushes end, its checkpoints are moved aside.
  absl::Status BeginJob(uint64_t job);
  // Before a slice is installed: a job that clips reduces each step's norm with the
  // coordinator, under this slice's index and map.
  absl::Status PrepareNorm(const PendingInit& p);
  void Log(const std::string& line) const {
    if (options_.log) options_.log(line);
  }

  const ShardApplierOptions options_;
  ShardCore* const shard_;
  const std::unique_ptr<const CheckpointStore> checkpoints_;  // a directory (checkpoint_dir) or memory
  const CheckpointDir* const dir_;                            // checkpoints_ when a directory, else null
  std::unique_ptr<PendingInit> pending_;
  uint64_t fingerprint_ = 0;
  int held_index_ = 0;                   // the slice held (0: none yet)
  int disk_index_ = 0;                   // the slice of the newest checkpoint found at Prepare (0: none)
  uint64_t job_ = 0;                     // the coordinator's job of the slice held (0: none, or an earlier release's)
  std::atomic<bool> stream_open_{true};  // set by the stream's reader, read by the applying thread
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SHARD_APPLY_H_
