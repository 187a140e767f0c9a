#include "server/daemon/network.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "server/rpc/service.h"

namespace omnilearn {
namespace server {
namespace {

// The gRPC server of `service` on `address` (its port 0: any; *bound_port says which, 0
// when it could not listen).
std::unique_ptr<grpc::Server> Listen(const DaemonFlags& f, const std::string& address,
                                     const std::shared_ptr<grpc::ServerCredentials>& credentials,
                                     grpc::Service* service, grpc::Service* peers, int* bound_port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, credentials, bound_port);
  ConfigureServerBuilder(builder, f.max_rpc_threads);
  builder.RegisterService(service);
  if (peers != nullptr) builder.RegisterService(peers);
  return builder.BuildAndStart();
}

}  // namespace

absl::StatusOr<std::string> TokenFromFlags(const DaemonFlags& f) {
  std::string token;
  if (!f.auth_token_file.empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(f.auth_token_file);
    if (!t.ok()) return t.status();
    token = *t;
  }
  if (!IsLoopbackAddress(f.bind) && f.tls_cert.empty() && token.empty()) {
    std::fprintf(stderr,
                 "omnilearn_server: WARNING: listening on %s with neither TLS nor a token: anyone who can reach "
                 "this port can read and change the model (see --tls_cert, --auth_token_file)\n",
                 f.bind.c_str());
  }
  return token;
}

absl::StatusOr<std::string> PeerTokenFromFlags(const DaemonFlags& f, const std::string& worker_token) {
  std::string peer;
  if (!f.peer_token_file.empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(f.peer_token_file);
    if (!t.ok()) return t.status();
    peer = *t;
  }
  if (peer.empty() && !IsLoopbackAddress(f.bind)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sharded job's servers must prove to each other that they are servers of the job, and this one listens "
        "on ",
        f.bind,
        ": give every server of the job --peer_token_file (one secret, not the "
        "workers' token), or listen on loopback only (--bind=127.0.0.1)"));
  }
  if (!peer.empty() && peer == worker_token) {
    return absl::InvalidArgumentError(
        "--peer_token_file holds the workers' token: the servers' secret must be another, or every worker could "
        "register as a shard");
  }
  return peer;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentials(const DaemonFlags& f) {
  const std::string ca = f.peer_tls_ca;
  if (ca.empty()) {
    if (!f.tls_cert.empty()) {
      return absl::InvalidArgumentError(
          "a sharded job with --tls_cert needs --peer_tls_ca: its servers call each other over TLS too");
    }
    return grpc::InsecureChannelCredentials();
  }
  return MakeChannelCredentials({ca, f.tls_cert, f.tls_key});
}

absl::StatusOr<PeerAccess> PeerAccessFromFlags(const DaemonFlags& f, bool sharded, const std::string& token) {
  PeerAccess peers{nullptr, token, ""};
  if (!sharded) return peers;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> c = PeerCredentials(f);
  if (!c.ok()) return c.status();
  peers.credentials = *c;
  absl::StatusOr<std::string> peer_token = PeerTokenFromFlags(f, token);
  if (!peer_token.ok()) return peer_token.status();
  peers.peer_token = *peer_token;
  return peers;
}

absl::StatusOr<std::unique_ptr<grpc::Server>> ListenOnFlags(const DaemonFlags& f, grpc::Service* service,
                                                            grpc::Service* peers, int* bound_port) {
  auto credentials = MakeServerCredentials({f.tls_cert, f.tls_key, f.tls_client_ca});
  if (!credentials.ok()) return credentials.status();
  const std::string address = absl::StrCat(f.bind, ":", f.port);
  *bound_port = 0;
  std::unique_ptr<grpc::Server> server = Listen(f, address, *credentials, service, peers, bound_port);
  if (!server || *bound_port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  return server;
}

absl::StatusOr<std::unique_ptr<metrics::MetricsExposer>> ExposeMetrics(const DaemonFlags& f,
                                                                       metrics::Registry& registry) {
  metrics::AddProcessMetrics(registry);
  if (f.metrics_port == 0) return std::unique_ptr<metrics::MetricsExposer>();
  return metrics::MetricsExposer::Start(f.metrics_bind, f.metrics_port, &registry);
}

}  // namespace server
}  // namespace omnilearn
