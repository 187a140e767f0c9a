// A sharded job's coordinator and its shard servers, in the coordinator's terms
// (docs/SHARDING.md): a shard's registration as CoordinatorShards judges it, and the
// commands it queues for a shard's stream. rpc/shard_wire.h decodes and encodes them
// (ShardHello, ShardCommand): nothing here knows the wire.
#ifndef OMNILEARN_SERVER_CONTROL_SHARD_COMMANDS_H_
#define OMNILEARN_SERVER_CONTROL_SHARD_COMMANDS_H_

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "absl/time/time.h"
#include "common/model_layout.h"
#include "common/worker_id.h"
#include "server/data/parameter_store.h"
#include "server/data/replicated_step.h"

namespace omnilearn {
namespace server {

// The longest address a shard may give, and the most checkpoint versions it may list.
inline constexpr int kMaxShardAddressBytes = 255;
inline constexpr int kMaxShardCheckpoints = 1000;
// The most slices whose replicas a shard may say it keeps.
inline constexpr int kMaxShardReplicaSlices = 64;

// A shard server's registration: the job it was started for, the slice it asks for, what it
// holds and what its release can do. Fields as the shard sent them, unchecked
// (CheckShardRegistration checks them before anything is taken from them), but for at most
// kMaxShardCheckpoints + 1 versions: a longer list is refused without being copied whole.
struct ShardRegistration {
  std::string address;  // where workers reach it
  uint64_t shards = 0;  // the job's shard count and partitions, as it was started
  int64_t partition_bytes = 0;
  uint64_t index = 0;                         // the slice asked for (0: any)
  std::vector<uint64_t> checkpoint_versions;  // the versions of its slice's checkpoints
  uint64_t fingerprint = 0;                   // the map of the slice it holds (0: none)
  bool reduces_norm = false;                  // it takes part in a clipped job's norm
  bool resets_jobs = false;                   // it takes a later job's slice (--reset_when_done)
  bool steps_ahead = false;                   // it steps a round decided ahead (--shard_steps_ahead)
  // The versions of other slices' replicas it keeps (ServerPeers.KeepReplica), by slice;
  // as many as the checkpoint bound allows per slice, for at most kMaxShardReplicaSlices.
  std::map<uint64_t, std::vector<uint64_t>> replicas;
};

// The slice's layout, first values (which follow it) or checkpoint to go back to, and the
// job's optimizer and mode.
struct ShardInitCommand {
  int index = 0;
  ModelLayout layout;  // the whole model's
  uint64_t version = 0;
  uint64_t fingerprint = 0;  // the job's map
  OptimizerOptions optimizer;
  absl::Duration member_wait;  // how long a step waits for a member's slice
  bool sync = true;
  bool restore = false;        // no values follow: the slice comes from its checkpoint of `version`
  uint64_t job = 1;            // the coordinator's job (--reset_when_done counts them)
  bool whole_tensors = false;  // the map cuts no tensor (ShardMap::whole_tensors)
  // With `restore`: the checkpoint is the replica the server at this address keeps ("": the
  // shard's own).
  std::string replica_from;
};

// A worker's session on the shard: opened with its secret, or closed.
struct ShardSessionCommand {
  WorkerId id = 0;
  std::string secret;
  bool closed = false;
};

// Write the slice's checkpoint at `version`; sync: `history` is the coordinator's step
// history there (0: not checked).
struct ShardCheckpointCommand {
  uint64_t version = 0;
  uint64_t history = 0;
  std::string replica_to;  // where the slice's replica goes once written ("": nowhere)
};

// What a worker's Join answers of a sharded job: the map and where each slice is served
// ([0] the coordinator).
struct ShardMapAnswer {
  int shards = 1;
  int64_t partition_bytes = 0;
  uint64_t fingerprint = 0;
  bool push_in_order = false;  // --push_slices_in_order
  bool whole_tensors = false;  // the map cuts no tensor (ShardMap::whole_tensors)
  std::vector<std::string> addresses;
};

// One command of a shard's stream; std::monostate: none came in time (the stream waits on).
using ShardCommand = std::variant<std::monostate, ShardInitCommand, ShardSessionCommand, ReplicatedStep,
                                  ShardCheckpointCommand, RoundAhead>;

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_SHARD_COMMANDS_H_
