// The server's options from its flags (DaemonFlags): ranges checked, choices parsed,
// what a sharded job cannot do yet refused. Pure but for the host name.
#ifndef OMNILEARN_SERVER_DAEMON_OPTIONS_H_
#define OMNILEARN_SERVER_DAEMON_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/omnilearn.pb.h"
#include "server/control/parameter_server_core.h"
#include "server/daemon/flags.h"
#include "server/rpc/service.h"

namespace omnilearn {
namespace server {

absl::Status CheckFlags(const DaemonFlags& f);

// The server's options from the flags; `wire_dtype` is the service's.
absl::StatusOr<ServerOptions> OptionsFromFlags(const DaemonFlags& f, v1::WireDtype* wire_dtype);

ServiceLimits LimitsFromFlags(const DaemonFlags& f);

// What a sharded job needs beyond one server (two checkpoints kept: the newest may not be
// every shard's yet), refused at start rather than done wrong.
absl::Status CheckShardable(const DaemonFlags& f, const ServerOptions& o);

int64_t PartitionBytes(const DaemonFlags& f);

// --election's needs (InvalidArgument saying which is missing); OK without --election.
absl::Status CheckElection(const DaemonFlags& f);
std::string AdvertisedAddress(const DaemonFlags& f, int port);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_OPTIONS_H_
