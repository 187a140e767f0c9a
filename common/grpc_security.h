// Transport security shared by the server and the worker: TLS credentials from PEM
// files (server certificate and key; a CA for workers; mutual TLS when the server is
// given a client CA) and a shared bearer token sent as "authorization: Bearer <token>".
#ifndef OMNILEARN_COMMON_GRPC_SECURITY_H_
#define OMNILEARN_COMMON_GRPC_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace omnilearn {

// The metadata key of the bearer token (gRPC wants lower case).
inline constexpr char kAuthorizationKey[] = "authorization";
// The metadata key of the peer secret the servers of a sharded job prove themselves with
// to each other (--peer_token_file): never the workers' bearer token.
inline constexpr char kPeerTokenKey[] = "omnilearn-peer-token";

// The token in `path`, without surrounding white space. InvalidArgument when the
// file cannot be read or holds no token.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The whole file; InvalidArgument naming `what` when it cannot be read or is empty.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view what);

struct ServerTlsFiles {
  std::string cert;       // PEM certificate chain; with `key` turns TLS on
  std::string key;        // PEM private key
  std::string client_ca;  // PEM CA: when set, workers must present a certificate it signed
};

// Insecure credentials when no file is given; TLS otherwise. InvalidArgument when only
// one of cert/key is given, a client CA comes without them, or a file cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerTlsFiles& files);

struct ClientTlsFiles {
  std::string ca;    // PEM CA that signed the server's certificate; turns TLS on
  std::string cert;  // PEM client certificate (mutual TLS), with `key`
  std::string key;
};

// Insecure credentials when no file is given; TLS otherwise. InvalidArgument as above.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const ClientTlsFiles& files);

// Adds "authorization: Bearer <token>" to a call's metadata; nothing for an empty token.
void AddBearerToken(grpc::ClientContext& ctx, absl::string_view token);

// Whether an "authorization" value carries `token` (compared in constant time).
bool BearerTokenMatches(absl::string_view header_value, absl::string_view token);

// Adds the peer secret to a call between servers of a job; nothing for an empty one.
void AddPeerToken(grpc::ClientContext& ctx, absl::string_view token);

// Whether a call's metadata carries the peer secret `token` (compared in constant time;
// false for an empty `token`).
bool PeerTokenMatches(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata, absl::string_view token);

// Whether an address given to --bind is loopback-only (127.0.0.0/8, ::1, localhost).
bool IsLoopbackAddress(absl::string_view address);

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_GRPC_SECURITY_H_
