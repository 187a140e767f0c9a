// The coordinator's decisions as its shards receive them (docs/SHARDING.md): a shard's
// registration, the commands CoordinatorShards queues (control/shard_commands.h), the
// optimizer's settings and the steps, each way, in one place.
#ifndef OMNILEARN_SERVER_RPC_SHARD_WIRE_H_
#define OMNILEARN_SERVER_RPC_SHARD_WIRE_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/omnilearn.pb.h"
#include "server/checkpoint/checkpoint_health.h"
#include "server/control/shard_commands.h"
#include "server/data/parameter_store.h"
#include "server/data/replicated_step.h"

namespace omnilearn {
namespace server {

// What every shard's optimizer shares with the coordinator's, and how long a step waits
// for a member's slice.
v1::ShardOptimizer OptimizerToProto(const OptimizerOptions& o, absl::Duration member_wait);
// InvalidArgument for an optimizer this release does not know. Param groups come by name
// (ParamGroup::names): the shard resolves them against its slice (ResolveGroupNames).
absl::Status OptimizerFromProto(const v1::ShardOptimizer& p, OptimizerOptions* o);
// The wire's optimizer kind as the store's; none for UNSPECIFIED or a kind of a later release.
std::optional<OptimizerKind> OptimizerKindFromProto(v1::OptimizerKind kind);
// The store's kind as the wire's (the enum's value named OPTIMIZER_KIND_<name>).
v1::OptimizerKind OptimizerKindToProto(OptimizerKind kind);

// A shard's hello as the coordinator judges it (the fields as sent: CheckShardRegistration
// checks them), and the commands of a shard's stream (std::monostate: an empty command).
ShardRegistration RegistrationFromProto(const v1::ShardHello& hello);
v1::ShardCommand CommandToProto(const ShardCommand& command);
// A Join's answer of the job's map.
void ShardMapToProto(const ShardMapAnswer& answer, v1::ShardMap* out);

v1::ShardStep StepToProto(const ReplicatedStep& step);
ReplicatedStep StepFromProto(const v1::ShardStep& p);
RoundAhead RoundAheadFromProto(const v1::ShardRoundAhead& p);

// A server's checkpoints on the wire (the status, a shard's report), and back:
// InvalidArgument for an age that is not a finite number of seconds in [0, a year] or an
// error longer than kMaxCheckpointErrorBytes.
v1::CheckpointStatus CheckpointsToProto(const CheckpointHealthView& view);
absl::StatusOr<CheckpointHealthView> CheckpointsFromProto(const v1::CheckpointStatus& p);
inline constexpr size_t kMaxCheckpointErrorBytes = 4096;

// The most members a step may name, and the longest session secret a command may carry.
inline constexpr int kMaxStepMembers = 100000;               // --num_workers' bound
inline constexpr double kMaxPredictSteps = kMaxStepMembers;  // above PredictedSteps's bound (1000)
inline constexpr size_t kMaxSessionSecretBytes = 64;

// A coordinator's command, every number range-checked before a shard applies any of it:
// InvalidArgument naming the field (optimizer settings, a step's rate, scale, blend,
// momentum and members' weights, a session's secret, a round ahead's rate and members). What only the slice can judge
// (a step's version, a chunk's place, the map) is checked where it is applied.
absl::Status CheckShardCommand(const v1::ShardCommand& command);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SHARD_WIRE_H_
