// The daemon's checkpoints: --checkpoint_dir set up, the newest valid checkpoint resumed
// (or, with --fresh, moved aside), and what each attempt did printed.
#ifndef OMNILEARN_SERVER_DAEMON_RESUME_H_
#define OMNILEARN_SERVER_DAEMON_RESUME_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/checkpoint/checkpointer.h"
#include "server/control/coordinator_shards.h"
#include "server/control/parameter_server_core.h"
#include "server/daemon/flags.h"
#include "server/rpc/replica_calls.h"

namespace omnilearn {
namespace server {

// Prints what a checkpoint attempt did; false on an error (the server goes on: the
// previous checkpoints are intact).
bool ReportCheckpoint(const absl::StatusOr<std::string>& written);

// --checkpoint_dir: resumes from the newest valid checkpoint (or, with --fresh, moves
// the old ones aside) and sets up the timer; a sharded coordinator's (`shards`) recovery
// goes back to these checkpoints. Errors stop the server: a checkpoint that does not fit
// the flags is never silently replaced by a fresh start. When checkpoints are kept,
// `*health` sees them (and the core's /metrics shows it).
absl::Status SetUpCheckpoints(const DaemonFlags& f, ParameterServerCore* core, CoordinatorShards* shards,
                              std::unique_ptr<Checkpointer>* checkpointer, std::unique_ptr<CheckpointHealth>* health);

// A sharded coordinator's own slice kept twice (--replicate_slices, after SetUpCheckpoints):
// each checkpoint it writes also goes to the server of slice 1 (through `sender`), and a
// coordinator without a job (started on an empty disk, its host lost) takes it from the
// replicas of slice 0 that a registering shard keeps (fetched over `calls`, kept as its own
// checkpoints, resumed as at a restart). Every pointer outlives the serving.
void ReplicateCoordinator(const DaemonFlags& f, const PeerCalls& calls, ReplicaSender* sender,
                          ParameterServerCore* core, CoordinatorShards* shards, Checkpointer* checkpointer,
                          CheckpointHealth* health);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_RESUME_H_
