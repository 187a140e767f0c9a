// Checkpoints: everything a restarted server needs to go on as if nothing happened, in
// one safetensors file (common/safetensors.h). Tensors: the model under its layout's
// names, the optimizer's buffers under "optimizer.<buffer>/<name>". `__metadata__`:
// format, version, global sample count, mode, optimizer, counters, the controller's
// memory of each worker by name (JSON) and, for a sharded job's coordinator, the whole
// model's layout and how it is cut. A CRC-32 of the data guards it.
#ifndef OMNILEARN_SERVER_CHECKPOINT_CHECKPOINT_H_
#define OMNILEARN_SERVER_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model_layout.h"
#include "controller/batch_controller.h"
#include "server/control/epoch_sampler.h"
#include "server/data/parameter_store.h"

namespace omnilearn {
namespace server {

inline constexpr char kCheckpointFormat[] = "omnilearn.checkpoint.v1";
inline constexpr char kExportFormat[] = "omnilearn.model.v1";
inline constexpr char kOptimizerPrefix[] = "optimizer.";
inline constexpr uint64_t kMaxSliceIndex = 1 << 20;  // a checkpoint's slice index, as read

// A sharded job as its coordinator's checkpoint records it: the whole model (the
// checkpoint's own layout is slice 0's) and how it is cut, from which a restarted
// coordinator plans the same shard map again.
struct ShardedJob {
  ModelLayout layout;
  int shards = 1;
  int64_t partition_bytes = 0;
  bool whole_tensors = false;  // the map cuts no tensor (ShardMap::whole_tensors)
  bool operator==(const ShardedJob& o) const {
    return layout == o.layout && shards == o.shards && partition_bytes == o.partition_bytes &&
           whole_tensors == o.whole_tensors;
  }
};

struct CheckpointState {
  ModelLayout layout;
  std::shared_ptr<const std::vector<float>> weights;
  // Named optimizer buffers ("momentum"), each layout.total_elements() floats, shared
  // with the store that was captured (it steps into other buffers while these are held).
  OptimizerBuffers optimizer_state;
  OptimizerScalars optimizer_scalars;  // ParameterStore::ScalarState
  std::vector<double> group_rates;     // a worker's scheduler's (ParameterStore::group_rates); empty: none
  std::string optimizer = "sgd";
  // The optimizer the job ran (the step's options; nullopt: a checkpoint of an earlier
  // release), and the worker it came from ("": the server's flags).
  std::optional<OptimizerOptions> optimizer_options;
  std::string optimizer_from;
  std::string mode;             // "sync", "async", "ssp"
  uint64_t version = 0;         // also the learning-rate schedule's position
  double adam_time = -1;        // ParameterStore::adam_time (< 0: not known, the version)
  uint64_t history = 0;         // ParameterStore::history (0: not known, an earlier release's)
  uint64_t global_samples = 0;  // the epoch position
  uint64_t rounds = 0;
  uint64_t adjustments = 0;
  std::map<std::string, controller::WorkerMemory> controller;  // by worker name
  SamplerState sampler;               // the epoch's permutation position and samples still to train
  uint64_t job = 1;                   // the daemon's job counter (not restored: a new process starts at 1)
  std::optional<ShardedJob> sharded;  // a sharded job's coordinator (nullopt: one server, or a shard)
  int slice = 0;                      // a shard's: the slice it holds (0: not a shard's, or an earlier release's)
  absl::Time created = absl::UnixEpoch();
};

// A store's part of a checkpoint, taken without copying (weights and optimizer state
// shared): layout, weights, optimizer state, optimizer and version. The store must hold a
// model.
CheckpointState CaptureStore(const ParameterStore& store);
// CaptureStore's inverse: the checkpoint's model, optimizer state, version, Adam time and
// step history into a store without a model (ParameterStore::Restore's errors);
// InvalidArgument for a checkpoint without weights.
absl::Status RestoreStore(const CheckpointState& state, ParameterStore* store);

// Writes atomically (temporary file, fsync, rename, fsync of the directory).
absl::Status WriteCheckpoint(const std::string& path, const CheckpointState& state);
// NotFound, DataLoss (truncated, corrupt, checksum), InvalidArgument (not a checkpoint
// of this format, or inconsistent contents).
absl::StatusOr<CheckpointState> ReadCheckpoint(const std::string& path);
// The same file's bytes in memory, and back (a slice's replica on another server).
// ReadCheckpoint's errors, but NotFound.
absl::StatusOr<std::string> EncodeCheckpoint(const CheckpointState& state);
absl::StatusOr<CheckpointState> DecodeCheckpoint(const std::string& bytes);

// The weights alone, under the layout's names (the trained model, for Python or
// --init_from). Atomic like a checkpoint.
absl::Status ExportModel(const std::string& path, const ModelLayout& layout, const std::vector<float>& weights,
                         uint64_t version);

// Where a server keeps its checkpoints: a directory (CheckpointDir) or, for a sharded job's
// servers started without one, memory (MemoryCheckpoints: a partition is survived, a
// process's restart is not).
class CheckpointStore {
 public:
  virtual ~CheckpointStore() = default;
  // Keeps the state as the checkpoint of its version and drops the oldest beyond the
  // store's count. Returns the path written ("" in memory).
  virtual absl::StatusOr<std::string> Write(const CheckpointState& state) const = 0;
  // The versions held, newest first.
  virtual std::vector<uint64_t> Versions() const = 0;
  virtual bool Has(uint64_t version) const = 0;
  // The checkpoint of `version`: NotFound when there is none; DataLoss when it is unreadable.
  virtual absl::StatusOr<CheckpointState> Load(uint64_t version) const = 0;
  // Drops the checkpoints newer than `version` (the job went back to it: they are of a
  // history that did not happen).
  virtual absl::Status DropNewerThan(uint64_t version) const = 0;
  // A new job on the same daemon: the previous job's checkpoints go aside (a directory's
  // into a sub-directory, whose path is returned; memory's are dropped). "" when nothing moved.
  virtual absl::StatusOr<std::string> MoveAside(absl::Time now) const = 0;
  // For messages: the directory, or "memory".
  virtual std::string where() const = 0;
};

// A directory of checkpoints named ckpt-<version>.safetensors. Thread-compatible.
class CheckpointDir : public CheckpointStore {
 public:
  // keep >= 1: how many checkpoints to keep (older ones are deleted after each write).
  CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {}

  // Creates the directory (and its missing parents) if needed, takes its lock (held by
  // this object and its copies until the last of them goes: one server a directory) and
  // deletes partial files a crash left behind. FailedPrecondition naming the holder when
  // another process holds the directory.
  absl::Status Prepare() const;
  // Checkpoint paths, newest (highest version) first.
  std::vector<std::string> List() const;
  // Writes the state atomically as the checkpoint of its version.
  absl::StatusOr<std::string> Write(const CheckpointState& state) const override;
  // The newest checkpoint that reads back valid (nullopt when there is none). A corrupt
  // or truncated one is reported through `warn` and skipped for the previous one.
  absl::StatusOr<std::optional<std::pair<std::string, CheckpointState>>> LoadNewest(
      const std::function<void(const std::string&)>& warn) const;
  std::vector<uint64_t> Versions() const override;
  bool Has(uint64_t version) const override;
  // As ReadCheckpoint when the file is there.
  absl::StatusOr<CheckpointState> Load(uint64_t version) const override;
  absl::Status DropNewerThan(uint64_t version) const override;
  // Moves every checkpoint into a new sub-directory "aside-<unix time>" (for --fresh);
  // nothing is deleted.
  absl::StatusOr<std::string> MoveAside(absl::Time now) const override;
  std::string where() const override { return dir_; }

  const std::string& dir() const { return dir_; }

 private:
  std::string PathOf(uint64_t version) const;
  // Every checkpoint file's version and path, newest first (List, Versions, DropNewerThan).
  std::vector<std::pair<uint64_t, std::string>> Found() const;

  // The directory's lock: an flock on its LOCK file, released when the last copy goes.
  class Lock;

  const std::string dir_;
  const int keep_;
  mutable std::shared_ptr<const Lock> lock_;  // set by Prepare
};

// The newest `keep` checkpoints held in memory: the captured states themselves (weights
// and optimizer state shared with the store that stepped on into other buffers), so a
// checkpoint costs no copy and no disk, and each one kept holds the slice's weights and
// optimizer state once more. Thread-safe.
class MemoryCheckpoints : public CheckpointStore {
 public:
  explicit MemoryCheckpoints(int keep) : keep_(keep) {}
  absl::StatusOr<std::string> Write(const CheckpointState& state) const override;
  std::vector<uint64_t> Versions() const override;
  bool Has(uint64_t version) const override;
  absl::StatusOr<CheckpointState> Load(uint64_t version) const override;
  absl::Status DropNewerThan(uint64_t version) const override;
  absl::StatusOr<std::string> MoveAside(absl::Time now) const override;
  std::string where() const override { return "memory"; }

 private:
  const int keep_;
  mutable absl::Mutex mu_;
  mutable std::map<uint64_t, CheckpointState> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CHECKPOINT_CHECKPOINT_H_
