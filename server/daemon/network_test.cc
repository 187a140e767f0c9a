// The daemon's network rules from given flag values: the workers' token, a sharded job's
// peer secret and its credentials, and a port that is never shared.
#include "server/daemon/network.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "proto/omnilearn.grpc.pb.h"

namespace omnilearn {
namespace server {
namespace {

// A file of the test's own holding `text`.
std::string FileWith(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Refusal(const absl::Status& s) {
  REQUIRE_FALSE(s.ok());
  return std::string(s.message());
}

TEST_CASE("the workers' token comes from its file; a missing or empty file is an error", "[daemon][network]") {
  DaemonFlags f;
  f.bind = "127.0.0.1";
  REQUIRE(*TokenFromFlags(f) == "");  // none: loopback needs none
  f.auth_token_file = FileWith("token", "  the-token\n");
  REQUIRE(*TokenFromFlags(f) == "the-token");
  f.auth_token_file = FileWith("empty", "\n");
  REQUIRE(absl::StrContains(Refusal(TokenFromFlags(f).status()), "empty"));
  f.auth_token_file = "/nonexistent/token";
  REQUIRE_FALSE(TokenFromFlags(f).ok());
}

TEST_CASE("a sharded server beyond loopback needs the servers' own secret, never the workers' token",
          "[daemon][network]") {
  DaemonFlags f;
  f.bind = "0.0.0.0";
  // A lone server has no peers: nothing to prove.
  REQUIRE(PeerAccessFromFlags(f, /*sharded=*/false, "").ok());
  // Sharded, listening beyond loopback without a secret: refused, naming the flag.
  REQUIRE(absl::StrContains(Refusal(PeerAccessFromFlags(f, true, "the-token").status()), "--peer_token_file"));
  // On loopback only, no secret is needed.
  f.bind = "127.0.0.1";
  absl::StatusOr<PeerAccess> local = PeerAccessFromFlags(f, true, "the-token");
  REQUIRE(local.ok());
  REQUIRE(local->peer_token.empty());
  // The workers' token as the servers' secret would make every worker a server of the job.
  f.bind = "0.0.0.0";
  f.peer_token_file = FileWith("same", "the-token");
  REQUIRE(absl::StrContains(Refusal(PeerAccessFromFlags(f, true, "the-token").status()), "workers' token"));
  f.peer_token_file = FileWith("peer", "the-peer");
  absl::StatusOr<PeerAccess> peers = PeerAccessFromFlags(f, true, "the-token");
  REQUIRE(peers.ok());
  REQUIRE(peers->peer_token == "the-peer");
  REQUIRE(peers->token == "the-token");  // the export pulls slices as a session of its own
  REQUIRE(peers->credentials != nullptr);
}

TEST_CASE("a sharded job on TLS calls its servers over TLS: --tls_cert needs --peer_tls_ca", "[daemon][network]") {
  DaemonFlags f;
  f.bind = "127.0.0.1";
  f.tls_cert = FileWith("cert.pem", "not read here");
  REQUIRE(absl::StrContains(Refusal(PeerCredentials(f).status()), "--peer_tls_ca"));
  f.peer_tls_ca = "/nonexistent/ca.pem";
  REQUIRE_FALSE(PeerCredentials(f).ok());
  f.tls_cert.clear();
  f.peer_tls_ca.clear();
  REQUIRE(PeerCredentials(f).ok());  // plain text between servers without TLS
}

TEST_CASE("a busy port is an error, never shared", "[daemon][network]") {
  DaemonFlags f;
  f.bind = "127.0.0.1";
  f.port = 0;                                                  // any free port
  v1::ParameterServer::Service first_service, second_service;  // every call UNIMPLEMENTED
  int port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> first = ListenOnFlags(f, &first_service, nullptr, &port);
  REQUIRE(first.ok());
  REQUIRE(port > 0);
  f.port = port;
  int second_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> second = ListenOnFlags(f, &second_service, nullptr, &second_port);
  REQUIRE(absl::IsUnavailable(second.status()));
  (*first)->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
