#include "common/grpc_security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/constant_time.h"

namespace omnilearn {
namespace {

absl::StatusOr<std::string> ReadWhole(const std::string& path, absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " file '", path, "'"));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWhole(path, "token");
  if (!text.ok()) return text.status();
  const std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is empty"));
  for (char c : token) {
    if (!absl::ascii_isgraph(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file '", path, "' holds white space or control characters"));
    }
  }
  return token;
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view what) {
  absl::StatusOr<std::string> text = ReadWhole(path, what);
  if (!text.ok()) return text.status();
  if (text->find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " file '", path, "' is not PEM"));
  }
  return text;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerTlsFiles& files) {
  if (files.cert.empty() && files.key.empty() && files.client_ca.empty()) return grpc::InsecureServerCredentials();
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert and --tls_key (and --tls_client_ca only with them)");
  }
  absl::StatusOr<std::string> cert = ReadPemFile(files.cert, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile(files.key, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!files.client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile(files.client_ca, "client CA");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const ClientTlsFiles& files) {
  if (files.ca.empty() && files.cert.empty() && files.key.empty()) return grpc::InsecureChannelCredentials();
  if (files.ca.empty()) return absl::InvalidArgumentError("a client certificate needs --tls_ca (TLS) as well");
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both --tls_cert and --tls_key");
  }
  grpc::SslCredentialsOptions options;
  absl::StatusOr<std::string> ca = ReadPemFile(files.ca, "TLS CA");
  if (!ca.ok()) return ca.status();
  options.pem_root_certs = *ca;
  if (!files.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile(files.cert, "TLS client certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(files.key, "TLS client key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

namespace {
constexpr absl::string_view kBearerPrefix = "Bearer ";
}  // namespace

void AddBearerToken(grpc::ClientContext& ctx, absl::string_view token) {
  if (!token.empty()) ctx.AddMetadata(kAuthorizationKey, absl::StrCat(kBearerPrefix, token));
}

bool BearerTokenMatches(absl::string_view header_value, absl::string_view token) {
  if (token.empty() || !absl::StartsWith(header_value, kBearerPrefix)) return false;
  return ConstantTimeEquals(header_value.substr(kBearerPrefix.size()), token);
}

void AddPeerToken(grpc::ClientContext& ctx, absl::string_view token) {
  if (!token.empty()) ctx.AddMetadata(kPeerTokenKey, std::string(token));
}

bool PeerTokenMatches(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata, absl::string_view token) {
  if (token.empty()) return false;
  auto it = metadata.find(kPeerTokenKey);
  return it != metadata.end() && ConstantTimeEquals(absl::string_view(it->second.data(), it->second.size()), token);
}

bool IsLoopbackAddress(absl::string_view address) {
  return absl::StartsWith(address, "127.") || address == "::1" || address == "[::1]" || address == "localhost";
}

}  // namespace omnilearn
