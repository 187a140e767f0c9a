// One server, or a sharded job's coordinator (--shards > 1): the core, the service, the
// checkpoints, served until a signal or (--exit_when_done) the job's end, then the results.
#ifndef OMNILEARN_SERVER_DAEMON_COORDINATOR_DAEMON_H_
#define OMNILEARN_SERVER_DAEMON_COORDINATOR_DAEMON_H_

#include <signal.h>

#include "server/daemon/flags.h"

namespace omnilearn {
namespace server {

// Until a signal in `signals` (blocked by the caller before any thread started) or, with
// --exit_when_done, the job's end; the exit status (2: flags that cannot work).
int RunCoordinator(const DaemonFlags& f, const sigset_t& signals);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_COORDINATOR_DAEMON_H_
