#include "worker/trainer/step_timing.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

// One step whose real compute takes `real` on the fake clock; returns (reported, step wall time).
std::pair<double, absl::Duration> Step(StepTiming& t, FakeClock& clock, int64_t batch, absl::Duration real) {
  const absl::Time begin = clock.Now();
  t.Start();
  clock.Advance(real);
  const double reported = t.Finish(batch);
  return {reported, clock.Now() - begin};
}

TEST_CASE("real compute is reported as measured", "[step_timing]") {
  FakeClock clock;
  auto t = *StepTiming::Create({}, &clock);
  REQUIRE(t.Follow(0).empty());
  auto [reported, took] = Step(t, clock, 32, absl::Milliseconds(7));
  REQUIRE(reported == Approx(0.007));
  REQUIRE(took == absl::Milliseconds(7));
}

TEST_CASE("a slowdown sleeps (F - 1) x the real time and reports F x it, by schedule", "[step_timing]") {
  FakeClock clock;
  StepTimingOptions o;
  o.slowdown = 2;
  o.slowdown_schedule = "1:4";
  auto t = *StepTiming::Create(o, &clock);
  REQUIRE(t.Follow(0.5).empty());  // the constant factor is no news
  auto [reported, took] = Step(t, clock, 8, absl::Milliseconds(10));
  REQUIRE(reported == Approx(0.020));
  REQUIRE(took == absl::Milliseconds(20));
  REQUIRE(t.Follow(1.0) == "slowdown 4.00 from epoch 1.00");
  REQUIRE(t.Follow(1.5).empty());
  std::tie(reported, took) = Step(t, clock, 8, absl::Milliseconds(10));
  REQUIRE(reported == Approx(0.040));
  REQUIRE(took == absl::Milliseconds(40));
}

TEST_CASE("an emulated step takes and reports its profile's time", "[step_timing]") {
  FakeClock clock;
  StepTimingOptions o;
  o.emulate_device = "0@4:1,2@4:3";
  auto t = *StepTiming::Create(o, &clock);
  REQUIRE(t.Follow(0) == "emulated device 4 ms + 1 ms/sample, jitter 0, from epoch 0.00");
  REQUIRE(t.Follow(0.1).empty());
  auto [reported, took] = Step(t, clock, 16, absl::Milliseconds(3));
  REQUIRE(reported == Approx(0.020));
  REQUIRE(took == absl::Milliseconds(20));
  REQUIRE(t.Follow(2.25) == "emulated device 4 ms + 3 ms/sample, jitter 0, from epoch 2.25");
  std::tie(reported, took) = Step(t, clock, 16, absl::Milliseconds(3));
  REQUIRE(reported == Approx(0.052));
  REQUIRE(t.overruns() == 0);
  REQUIRE_FALSE(t.TakeOverrunWarning());
}

TEST_CASE("an emulated step that real compute overran is counted and warned of once", "[step_timing]") {
  FakeClock clock;
  StepTimingOptions o;
  o.emulate_device = "1:0.5";  // 1 ms + 0.5 ms/sample: 5 ms at batch 8
  auto t = *StepTiming::Create(o, &clock);
  t.Follow(0);
  auto [reported, took] = Step(t, clock, 8, absl::Milliseconds(12));
  REQUIRE(reported == Approx(0.012));  // the time the step really took
  REQUIRE(took == absl::Milliseconds(12));
  REQUIRE(t.overruns() == 1);
  std::optional<std::string> warning = t.TakeOverrunWarning();
  REQUIRE(warning);
  REQUIRE(warning->find("12.0 ms at batch 8") != std::string::npos);
  REQUIRE(warning->find("emulated time (5.0 ms)") != std::string::npos);
  Step(t, clock, 8, absl::Milliseconds(12));
  REQUIRE(t.overruns() == 2);
  REQUIRE_FALSE(t.TakeOverrunWarning());  // once
}

TEST_CASE("an emulated device with a slowdown, or malformed, is refused", "[step_timing]") {
  FakeClock clock;
  StepTimingOptions o;
  o.emulate_device = "1:1";
  o.slowdown = 2;
  REQUIRE(StepTiming::Create(o, &clock).status().code() == absl::StatusCode::kInvalidArgument);
  o.slowdown = 1;
  o.slowdown_schedule = "1:2";
  REQUIRE(StepTiming::Create(o, &clock).status().code() == absl::StatusCode::kInvalidArgument);
  o.slowdown_schedule = "";
  o.emulate_device = "1";
  REQUIRE(StepTiming::Create(o, &clock).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
