#include "common/clock.h"

#include <thread>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace {

TEST_CASE("a fake clock moves only when advanced", "[clock]") {
  FakeClock clock;
  const absl::Time t0 = clock.Now();
  REQUIRE(clock.Now() == t0);
  clock.Advance(absl::Seconds(5));
  REQUIRE(clock.Now() == t0 + absl::Seconds(5));
}

TEST_CASE("a fake-clock wait ends when the clock passes its deadline", "[clock]") {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  bool result = true;
  const absl::Time deadline = clock.Now() + absl::Minutes(10);
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(mu, absl::Condition(&flag), deadline);
  });
  clock.Advance(absl::Minutes(10));
  waiter.join();  // returns only because fake time reached the deadline
  REQUIRE_FALSE(result);
}

TEST_CASE("a fake-clock wait ends when its condition holds", "[clock]") {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  bool result = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(mu, absl::Condition(&flag), clock.Now() + absl::Hours(1));
  });
  {
    absl::MutexLock lock(&mu);
    flag = true;
  }
  waiter.join();
  REQUIRE(result);
}

TEST_CASE("the real clock follows absl::Now", "[clock]") {
  const absl::Time before = absl::Now();
  const absl::Time now = Clock::Real()->Now();
  REQUIRE(now >= before);
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  bool never = false;
  REQUIRE_FALSE(Clock::Real()->AwaitWithDeadline(mu, absl::Condition(&never), absl::Now()));
}

}  // namespace
}  // namespace omnilearn

namespace omnilearn {
namespace {

TEST_CASE("sleeping on a fake clock moves it without waiting", "[clock]") {
  FakeClock clock;
  const absl::Time t0 = clock.Now();
  const absl::Time real0 = absl::Now();
  clock.SleepFor(absl::Hours(3));
  REQUIRE(clock.Now() == t0 + absl::Hours(3));
  REQUIRE(absl::Now() - real0 < absl::Minutes(1));
}

}  // namespace
}  // namespace omnilearn
