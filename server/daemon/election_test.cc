#include "server/daemon/election.h"

#include <atomic>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a lease is held until half its TTL after the last renewal etcd answered was sent", "[election]") {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  LeaseTerm term(absl::Seconds(8), t0);
  CHECK(term.renew_every() == absl::Seconds(2));
  CHECK(term.held_until() == t0 + absl::Seconds(4));
  term.Renewed(t0 + absl::Seconds(2));
  CHECK(term.held_until() == t0 + absl::Seconds(6));
  term.Renewed(t0 + absl::Seconds(1));  // an older renewal answered late extends nothing
  CHECK(term.held_until() == t0 + absl::Seconds(6));
}

// A keeper over a fake clock whose renewals answer `answer`.
struct Kept {
  FakeClock clock;
  absl::Mutex mu;
  absl::Status answer ABSL_GUARDED_BY(mu);
  int renewals ABSL_GUARDED_BY(mu) = 0;
  std::string lost ABSL_GUARDED_BY(mu);
  absl::Time lost_at ABSL_GUARDED_BY(mu);
  std::unique_ptr<LeaseKeeper> keeper;

  Kept() {
    keeper = std::make_unique<LeaseKeeper>(
        [this] {
          absl::MutexLock lock(&mu);
          ++renewals;
          return answer;
        },
        LeaseTerm(absl::Seconds(8), clock.Now()), &clock,
        [this](const std::string& why) {
          absl::MutexLock lock(&mu);
          lost = why;
          lost_at = clock.Now();
        });
  }
  void Answer(absl::Status s) {
    absl::MutexLock lock(&mu);
    answer = std::move(s);
  }
  // Waits (bounded) for the keeper's `n`th renewal, or its loss.
  bool AwaitRenewals(int n) {
    absl::MutexLock lock(&mu);
    return mu.AwaitWithTimeout(absl::Condition(
                                   +[](Kept* k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(k->mu) {
                                     return k->renewals >= k->want || !k->lost.empty();
                                   },
                                   this),
                               absl::Seconds(10)) &&
           renewals >= n;
  }
  int want = 0;
  // Advances the clock by one renewal period and waits for the keeper to renew.
  bool Tick() {
    {
      absl::MutexLock lock(&mu);
      want = renewals + 1;
    }
    clock.Advance(absl::Seconds(2));
    return AwaitRenewals(want);
  }
  std::string Lost() {
    absl::MutexLock lock(&mu);
    return lost;
  }
};

TEST_CASE("a coordinator keeps its lease while etcd answers, and stops half a TTL after the last answer",
          "[election]") {
  Kept k;
  {
    absl::MutexLock lock(&k.mu);
    k.want = 1;
  }
  REQUIRE(k.AwaitRenewals(1));  // at once
  for (int i = 0; i < 5; ++i) REQUIRE(k.Tick());
  CHECK(k.Lost().empty());
  const absl::Time last_answered = k.clock.Now();
  // etcd stops answering (a partition): renewals fail, and the term runs out 4 s after the
  // last one answered was sent.
  k.Answer(absl::UnavailableError("etcd: deadline exceeded"));
  REQUIRE(k.Tick());
  CHECK(k.Lost().empty());
  k.clock.Advance(absl::Seconds(2));
  absl::MutexLock lock(&k.mu);
  REQUIRE(k.mu.AwaitWithTimeout(
      absl::Condition(
          +[](Kept* kept) ABSL_EXCLUSIVE_LOCKS_REQUIRED(kept->mu) { return !kept->lost.empty(); }, &k),
      absl::Seconds(10)));
  CHECK(k.lost_at == last_answered + absl::Seconds(4));
  CHECK_THAT(k.lost, Catch::Contains("no renewal"));
}

TEST_CASE("a coordinator whose lease etcd says expired stops at once", "[election]") {
  Kept k;
  {
    absl::MutexLock lock(&k.mu);
    k.want = 1;
  }
  REQUIRE(k.AwaitRenewals(1));
  k.Answer(absl::NotFoundError("the etcd lease 7 expired"));
  {
    absl::MutexLock lock(&k.mu);
    k.want = 2;
  }
  k.clock.Advance(absl::Seconds(2));
  REQUIRE(k.AwaitRenewals(2));
  absl::MutexLock lock(&k.mu);
  REQUIRE(k.mu.AwaitWithTimeout(
      absl::Condition(
          +[](Kept* kept) ABSL_EXCLUSIVE_LOCKS_REQUIRED(kept->mu) { return !kept->lost.empty(); }, &k),
      absl::Seconds(10)));
  CHECK(k.lost == "the etcd lease 7 expired");
  CHECK(k.lost_at == k.clock.Now());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
