#include "common/etcd_client.h"

#include <catch2/catch.hpp>

namespace omnilearn {
namespace {

TEST_CASE("an etcd address names its endpoints and the job's key", "[etcd]") {
  absl::StatusOr<EtcdTarget> t = ParseEtcdTarget("etcd://10.0.0.1:2379,etcd-b:2379/jobs/a");
  REQUIRE(t.ok());
  CHECK(t->endpoints == std::vector<std::string>{"10.0.0.1:2379", "etcd-b:2379"});
  CHECK(t->key == "/jobs/a");
  t = ParseEtcdTarget("etcd://127.0.0.1:2379");
  REQUIRE(t.ok());
  CHECK(t->key == kDefaultElectionKey);
  CHECK(IsEtcdAddress("etcd://x:1"));
  CHECK_FALSE(IsEtcdAddress("10.0.0.1:50051"));
}

TEST_CASE("a malformed etcd address is refused, saying what is wrong", "[etcd]") {
  for (const char* bad : {"10.0.0.1:2379", "etcd://", "etcd://host", "etcd://host:0", "etcd://host:70000",
                          "etcd://a:1,,b:2", "etcd://:2379", "etcd://a:1/"}) {
    INFO(bad);
    absl::StatusOr<EtcdTarget> t = ParseEtcdTarget(bad);
    REQUIRE_FALSE(t.ok());
    CHECK(absl::IsInvalidArgument(t.status()));
    CHECK_THAT(std::string(t.status().message()), Catch::Contains(bad));
  }
}

TEST_CASE("an etcd that does not answer is an UNAVAILABLE or DEADLINE_EXCEEDED error naming it", "[etcd]") {
  // Port 1 on loopback: nothing listens there; the call fails fast or at its bound.
  EtcdClient client(*ParseEtcdTarget("etcd://127.0.0.1:1"), absl::Milliseconds(300));
  absl::StatusOr<std::string> got = client.Coordinator();
  REQUIRE_FALSE(got.ok());
  CHECK((absl::IsUnavailable(got.status()) || absl::IsDeadlineExceeded(got.status())));
  CHECK_THAT(std::string(got.status().message()), Catch::Contains("127.0.0.1:1"));
}

}  // namespace
}  // namespace omnilearn
