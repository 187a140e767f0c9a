// The daemon's life once it serves: the line that says it listens, the monitor loop
// (timed checkpoints, plan and progress lines), the wait for a signal or the job's end,
// and the workers told to stop.
#ifndef OMNILEARN_SERVER_DAEMON_LIFECYCLE_H_
#define OMNILEARN_SERVER_DAEMON_LIFECYCLE_H_

#include <signal.h>

#include <atomic>

#include "common/metrics_exposer.h"
#include "proto/omnilearn.pb.h"
#include "server/checkpoint/checkpointer.h"
#include "server/control/coordinator_shards.h"
#include "server/control/parameter_server_core.h"
#include "server/daemon/flags.h"

namespace omnilearn {
namespace server {

void PrintListening(const DaemonFlags& f, const ServerOptions& o, int port, v1::WireDtype wire_dtype, bool token,
                    const metrics::MetricsExposer* exposer);

// Until `stopping`: timed checkpoints, a line when the batch plan changes, progress lines
// every --progress_every_s, and (a sharded job, `shards`) every 5 s the slices training waits for.
void Monitor(const DaemonFlags& f, ParameterServerCore* core, Checkpointer* checkpointer, CoordinatorShards* shards,
             const std::atomic<bool>* stopping);

// Until a signal, or (--exit_when_done) the end of the job.
void AwaitSignalOrEnd(const DaemonFlags& f, const sigset_t& signals, ParameterServerCore* core);

// The core answers every later call "stop"; it keeps answering until each live worker
// heard it, for up to --shutdown_grace_s.
void TellWorkersToStop(const DaemonFlags& f, ParameterServerCore* core);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_LIFECYCLE_H_
