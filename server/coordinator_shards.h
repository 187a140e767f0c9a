// The coordinator's side of a sharded job (docs/SHARDING.md): which shard servers
// registered, the job's shard map, and each shard's queue of commands (the slice's first
// values, sessions opened and closed, the steps to replay). The Shard RPC drains a
// shard's queue onto its stream; the core's Replication hooks fill the queues.
#ifndef OMNILEARN_SERVER_COORDINATOR_SHARDS_H_
#define OMNILEARN_SERVER_COORDINATOR_SHARDS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/shard_map.h"
#include "proto/omnilearn.pb.h"
#include "server/parameter_server_core.h"

namespace omnilearn {
namespace server {

struct CoordinatorShardsOptions {
  int shards = 1;  // the coordinator (slice 0) and shards - 1 shard servers
  int64_t partition_bytes = ShardMap::kDefaultPartitionBytes;
  std::string address;           // the coordinator's, as workers reach it
  v1::ShardOptimizer optimizer;  // what every shard's optimizer must share
  bool sync = true;              // the job's mode is sync (rounds)
  const Clock* clock = Clock::Real();
  std::function<void(const std::string&)> log;
};

// Thread-safe.
class CoordinatorShards {
 public:
  // What a shard's stream sends next: a command, with the slice's values after an init.
  struct Outgoing {
    v1::ShardCommand command;
    std::shared_ptr<const std::vector<float>> values;  // init: the slice's first values
  };

  explicit CoordinatorShards(CoordinatorShardsOptions options);

  // A shard server registers. Returns its index. FailedPrecondition for another shard
  // count or partition size than the coordinator's, for an index taken by a live shard,
  // when every slice has its shard, and for a shard (re)starting after the job's first
  // step (its slice's training would be lost: sharded checkpoints are not built yet).
  absl::StatusOr<int> Register(const v1::ShardHello& hello);
  // The next command for shard `index`, waiting until `deadline` (an empty command when
  // none came); false when the stream must end (the shard was replaced, or shutdown).
  bool Next(int index, Outgoing* out, absl::Time deadline);
  // The shard's stream ended.
  void Disconnect(int index);
  // Waits until every shard registered; Unavailable naming the missing ones after `deadline`.
  absl::Status AwaitShards(absl::Time deadline);
  void Shutdown();

  // A joiner's whole model: the job's map for it (planned once per layout), the slice 0
  // layout and values its join gives the core, and the full values kept until the core
  // says whose model it adopted. InvalidArgument when the model cannot be cut.
  absl::StatusOr<ShardMap> PlanFor(const ModelLayout& layout);
  void StashInitial(const std::string& joiner, const ModelLayout& layout, ShardMap map,
                    std::shared_ptr<const std::vector<float>> values);
  void ForgetInitial(const std::string& joiner);
  void FillShardMap(const ShardMap& map, v1::ShardMap* out) const;
  // Slice `index`'s layout (the model was adopted: an init was queued).
  ModelLayout SliceLayout(int index) const;
  // The job's whole layout once a model was adopted.
  std::optional<ModelLayout> job_layout() const;

  // The core's hooks (Replication): they only queue.
  Replication Hooks();

  int registered() const;

  // Each shard server as the coordinator sees it (omnilearn_ctl status lists them).
  struct ShardInfo {
    int index = 0;
    std::string address;
    bool connected = false;
    int64_t slice_bytes = 0;
    uint64_t steps_sent = 0;
    size_t queued = 0;
  };
  std::vector<ShardInfo> Shards() const;
  // Gauges per shard on the coordinator's /metrics: connected, commands queued, steps sent.
  void ExportMetrics(metrics::Registry& registry);

 private:
  struct Slot {
    std::string address;
    bool connected = false;
    uint64_t generation = 0;  // a new registration replaces the stream of the old one
    uint64_t steps_sent = 0;
    std::deque<Outgoing> queue;
  };
  void Enqueue(const v1::ShardCommand& command) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueInit(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ModelAdopted(const std::string& joiner);

  const CoordinatorShardsOptions options_;
  mutable absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);  // [0] unused: the coordinator's own slice
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool stepped_ ABSL_GUARDED_BY(mu_) = false;  // the job took a step: a slice cannot be re-sent
  struct Stashed {
    ModelLayout layout;
    ShardMap map;  // PlanFor's, for that layout
    std::shared_ptr<const std::vector<float>> values;
  };
  std::map<std::string, Stashed> stashed_ ABSL_GUARDED_BY(mu_);
  std::optional<ModelLayout> layout_ ABSL_GUARDED_BY(mu_);  // the job's whole model
  std::optional<ShardMap> map_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::vector<float>> initial_ ABSL_GUARDED_BY(mu_);
  std::map<WorkerId, std::string> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_COORDINATOR_SHARDS_H_
