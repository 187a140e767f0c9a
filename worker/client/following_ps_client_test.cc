#include "worker/client/following_ps_client.h"

#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

// A coordinator at `address` that counts the calls it took.
class FakeCoordinator : public PsClient {
 public:
  explicit FakeCoordinator(std::map<std::string, int>* calls, std::string address)
      : calls_(calls), address_(std::move(address)) {}
  absl::StatusOr<JoinReply> Join(const JoinRequest&, const ModelLayout&, absl::Span<const float>) override {
    ++(*calls_)["join " + address_];
    JoinReply r;
    r.message = address_;
    return r;
  }
  absl::StatusOr<uint64_t> Pull(uint64_t, uint64_t, const ModelLayout&, absl::Span<float>) override { return 0; }
  absl::StatusOr<PushReply> Push(const PushedStep&, const ModelLayout&, absl::Span<const float>) override {
    return PushReply{};
  }
  absl::StatusOr<PushReply> PushPull(const PushedStep&, const ModelLayout&, absl::Span<const float>, uint64_t*,
                                     absl::Span<float>) override {
    return PushReply{};
  }
  void SetSessionSecret(const std::string&) override {}
  absl::StatusOr<Action> Heartbeat(uint64_t) override {
    ++(*calls_)["heartbeat " + address_];
    return Action::kContinue;
  }
  absl::Status Leave(uint64_t, bool) override { return absl::OkStatus(); }

 private:
  std::map<std::string, int>* calls_;
  const std::string address_;
};

struct Fixture {
  absl::StatusOr<std::string> elected = absl::NotFoundError("no coordinator holds /omnilearn/coordinator");
  std::map<std::string, int> calls;
  int made = 0;
  FollowingPsClient client{[this] { return elected; },
                           [this](const std::string& address) -> absl::StatusOr<std::unique_ptr<PsClient>> {
                             ++made;
                             return std::make_unique<FakeCoordinator>(&calls, address);
                           }};
  ModelLayout layout = *ModelLayout::Create({{"w", {2}}});
  absl::StatusOr<JoinReply> Join() { return client.Join(JoinRequest{}, layout, {}); }
};

TEST_CASE("a worker joins the coordinator elected now, and the one elected after it", "[following]") {
  Fixture f;
  // Before any coordinator is elected: Unavailable (the session retries), saying why.
  absl::StatusOr<JoinReply> r = f.Join();
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsUnavailable(r.status()));
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("no coordinator holds"));
  CHECK(absl::IsUnavailable(f.client.Heartbeat(1).status()));

  f.elected = std::string("10.0.0.1:50051");
  r = f.Join();
  REQUIRE(r.ok());
  CHECK(r->message == "10.0.0.1:50051");
  REQUIRE(f.client.Heartbeat(1).ok());
  r = f.Join();  // the same coordinator: the same client
  CHECK(f.made == 1);

  // etcd out of reach at a rejoin: no Join, and the calls still go to the last coordinator.
  f.elected = absl::UnavailableError("etcd (127.0.0.1:2379): connection refused");
  CHECK(absl::IsUnavailable(f.Join().status()));
  REQUIRE(f.client.Heartbeat(1).ok());
  CHECK(f.calls["heartbeat 10.0.0.1:50051"] == 2);

  // Another elected: the next Join goes there, and every call after it.
  f.elected = std::string("10.0.0.2:50051");
  r = f.Join();
  REQUIRE(r.ok());
  CHECK(r->message == "10.0.0.2:50051");
  REQUIRE(f.client.Heartbeat(1).ok());
  CHECK(f.calls["heartbeat 10.0.0.2:50051"] == 1);
  CHECK(f.client.address() == "10.0.0.2:50051");
  CHECK(f.made == 2);
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
