#include "server/rpc/refusal_log.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a refusal is logged once per cause and peer in its window", "[refusals]") {
  RefusalLog log(absl::Minutes(1), 3);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const std::string token = "UNAUTHENTICATED: wrong bearer token";
  REQUIRE(log.ShouldLog("10.0.0.5", token, t0));
  REQUIRE_FALSE(log.ShouldLog("10.0.0.5", token, t0 + absl::Seconds(30)));
  REQUIRE(log.ShouldLog("10.0.0.6", token, t0 + absl::Seconds(20)));                                     // another peer
  REQUIRE(log.ShouldLog("10.0.0.5", "INVALID_ARGUMENT: model layout differs", t0 + absl::Seconds(40)));  // cause
  REQUIRE(log.ShouldLog("10.0.0.5", token, t0 + absl::Seconds(61)));  // its window is over
  // Bounded: a fourth key evicts the oldest (10.0.0.6's, at 20 s): the map never grows past 3.
  REQUIRE(log.ShouldLog("10.0.0.7", "x", t0 + absl::Seconds(62)));
  REQUIRE(log.ShouldLog("10.0.0.6", token, t0 + absl::Seconds(63)));  // forgotten, so logged again
  REQUIRE_FALSE(log.ShouldLog("10.0.0.7", "x", t0 + absl::Seconds(64)));
}

TEST_CASE("a peer's host is its address without the port", "[refusals]") {
  REQUIRE(PeerHost("ipv4:10.0.0.5:41234") == "10.0.0.5");
  REQUIRE(PeerHost("ipv6:[::1]:5000") == "[::1]");
  REQUIRE(PeerHost("unix:/tmp/s") == "/tmp/s");
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
