// How the daemon meets the network: its listening port and credentials, the workers'
// token, a sharded job's peer secret and credentials between its servers, /metrics.
#ifndef OMNILEARN_SERVER_DAEMON_NETWORK_H_
#define OMNILEARN_SERVER_DAEMON_NETWORK_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/metrics_exposer.h"
#include "server/daemon/flags.h"

namespace omnilearn {
namespace server {

// How this server calls the job's other servers: credentials, the workers' token (the
// export pulls slices as a session of its own) and the job's peer secret (the Shard call).
struct PeerAccess {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string token;
  std::string peer_token;
};

// --auth_token_file's token ("" without one); warns when the port is open to anyone.
absl::StatusOr<std::string> TokenFromFlags(const DaemonFlags& f);

// A sharded server's --peer_token_file secret ("" without one). Without one every server
// of the job must listen on loopback; it must not be the workers' token (a worker would
// then be a server of the job).
absl::StatusOr<std::string> PeerTokenFromFlags(const DaemonFlags& f, const std::string& worker_token);

// The credentials of this server's calls to the job's other servers (a shard's link to its
// coordinator, the coordinator's export pulls): TLS with --peer_tls_ca, presenting this
// server's own certificate, since a server that listens with TLS takes no plain text.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentials(const DaemonFlags& f);

// A coordinator's access to its job's other servers (`sharded`), or a single server's
// (the workers' token alone).
absl::StatusOr<PeerAccess> PeerAccessFromFlags(const DaemonFlags& f, bool sharded, const std::string& token);

// `service` (and the server-to-server `peers`, when not null) on --bind:--port with the
// TLS flags' credentials; *bound_port says which port. InvalidArgument for the TLS flags,
// Unavailable when it cannot listen.
absl::StatusOr<std::unique_ptr<grpc::Server>> ListenOnFlags(const DaemonFlags& f, grpc::Service* service,
                                                            grpc::Service* peers, int* bound_port);

// The process figures and, with --metrics_port, the /metrics endpoint (null without it).
absl::StatusOr<std::unique_ptr<metrics::MetricsExposer>> ExposeMetrics(const DaemonFlags& f,
                                                                       metrics::Registry& registry);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_NETWORK_H_
