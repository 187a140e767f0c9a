#include "common/grpc_security.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

namespace omnilearn {
namespace {

std::string WriteTemp(const std::string& name, const std::string& content) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << content;
  return path;
}

TEST_CASE("bearer tokens match exactly") {
  CHECK(BearerTokenMatches("Bearer s3cret", "s3cret"));
  CHECK_FALSE(BearerTokenMatches("Bearer s3cret2", "s3cret"));
  CHECK_FALSE(BearerTokenMatches("Bearer s3cre", "s3cret"));
  CHECK_FALSE(BearerTokenMatches("bearer s3cret", "s3cret"));
  CHECK_FALSE(BearerTokenMatches("s3cret", "s3cret"));
  CHECK_FALSE(BearerTokenMatches("", "s3cret"));
  CHECK_FALSE(BearerTokenMatches("Bearer ", ""));  // an empty token never matches
}

TEST_CASE("the peer secret matches exactly, under its own key") {
  std::multimap<grpc::string_ref, grpc::string_ref> md;
  CHECK_FALSE(PeerTokenMatches(md, "peer"));
  md.emplace(kAuthorizationKey, "Bearer peer");  // the workers' header does not count
  CHECK_FALSE(PeerTokenMatches(md, "peer"));
  md.emplace(kPeerTokenKey, "peer");
  CHECK(PeerTokenMatches(md, "peer"));
  CHECK_FALSE(PeerTokenMatches(md, "peer2"));
  CHECK_FALSE(PeerTokenMatches(md, "pee"));
  CHECK_FALSE(PeerTokenMatches(md, ""));  // an empty secret never matches
}

TEST_CASE("token files are trimmed and must hold one token") {
  CHECK(*ReadTokenFile(WriteTemp("t1", "  abc-123\n")) == "abc-123");
  CHECK(ReadTokenFile(WriteTemp("t2", "\n \n")).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReadTokenFile(WriteTemp("t3", "two words")).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReadTokenFile("/nonexistent/token").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("credentials: insecure without files, clear errors for half a configuration") {
  CHECK(MakeServerCredentials({}).ok());
  CHECK(MakeChannelCredentials({}).ok());
  const std::string pem = WriteTemp("x.pem", "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n");
  CHECK(MakeServerCredentials({pem, "", ""}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MakeServerCredentials({"", "", pem}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MakeServerCredentials({pem, "/nonexistent.key", ""}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MakeServerCredentials({pem, WriteTemp("notpem", "hello"), ""}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(MakeChannelCredentials({"", pem, pem}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MakeChannelCredentials({pem, pem, ""}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(MakeChannelCredentials({pem, "", ""}).ok());
}

TEST_CASE("loopback addresses") {
  CHECK(IsLoopbackAddress("127.0.0.1"));
  CHECK(IsLoopbackAddress("::1"));
  CHECK(IsLoopbackAddress("localhost"));
  CHECK_FALSE(IsLoopbackAddress("0.0.0.0"));
  CHECK_FALSE(IsLoopbackAddress("10.0.0.1"));
  CHECK_FALSE(IsLoopbackAddress("::"));
}

}  // namespace
}  // namespace omnilearn
