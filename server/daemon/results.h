// What the daemon leaves at the end of a job: the last checkpoint, the export (the whole
// model of a sharded job, its slices pulled from the shards) and the summary.
#ifndef OMNILEARN_SERVER_DAEMON_RESULTS_H_
#define OMNILEARN_SERVER_DAEMON_RESULTS_H_

#include "absl/time/time.h"
#include "server/checkpoint/checkpointer.h"
#include "server/control/coordinator_shards.h"
#include "server/control/parameter_server_core.h"
#include "server/daemon/flags.h"
#include "server/daemon/network.h"

namespace omnilearn {
namespace server {

// The last checkpoint, the export and the summary; the exit status (1 when one failed).
// A sharded job's shards are still serving: the last checkpoint reaches them, the export
// pulls their slices.
int WriteResults(const DaemonFlags& f, ParameterServerCore* core, Checkpointer* checkpointer, CoordinatorShards* shards,
                 const PeerAccess& peers, absl::Time start);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_RESULTS_H_
