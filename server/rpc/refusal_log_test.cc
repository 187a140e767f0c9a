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

TEST_CASE("a refusal's line names the call, the host and the cause, once per window", "[refusals]") {
  RefusalLog log;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const std::optional<std::string> line =
      log.Line("a join", "ipv4:10.0.0.5:41234", absl::StatusCode::kUnauthenticated, "wrong bearer token", t0);
  REQUIRE(line ==
          "refused a join from 10.0.0.5: UNAUTHENTICATED: wrong bearer token "
          "(logged once a minute per cause and peer)");
  // Another port of the same host, within the window: the same cause, not logged again.
  REQUIRE_FALSE(log.Line("a join", "ipv4:10.0.0.5:50000", absl::StatusCode::kUnauthenticated, "wrong bearer token",
                         t0 + absl::Seconds(10))
                    .has_value());
  const std::string long_message(300, 'x');
  const std::optional<std::string> cut =
      log.Line("a shard's registration", "ipv4:10.0.0.6:1", absl::StatusCode::kInvalidArgument, long_message, t0);
  REQUIRE(cut == "refused a shard's registration from 10.0.0.6: INVALID_ARGUMENT: " + std::string(200, 'x') +
                     " (logged once a minute per cause and peer)");
}

TEST_CASE("a peer's host is its address without the port", "[refusals]") {
  REQUIRE(PeerHost("ipv4:10.0.0.5:41234") == "10.0.0.5");
  REQUIRE(PeerHost("ipv6:[::1]:5000") == "[::1]");
  REQUIRE(PeerHost("unix:/tmp/s") == "/tmp/s");
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
