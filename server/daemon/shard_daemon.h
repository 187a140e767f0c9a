// A shard server (--coordinator): one slice of a coordinator's job, served until a signal
// or the end of its link to the coordinator.
#ifndef OMNILEARN_SERVER_DAEMON_SHARD_DAEMON_H_
#define OMNILEARN_SERVER_DAEMON_SHARD_DAEMON_H_

#include <signal.h>

#include "server/daemon/flags.h"

namespace omnilearn {
namespace server {

// A shard server: one slice of a coordinator's job, until a signal or the link's end.
int RunShard(const DaemonFlags& f, const sigset_t& signals);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_SHARD_DAEMON_H_
