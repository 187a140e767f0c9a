#include "worker/devices/emulated_device.h"

#include <cmath>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("an emulated device's step takes FIXED + MS_PER_SAMPLE x batch", "[emulated_device]") {
  auto d = EmulatedDevice::Parse("2:0.5", 1);
  REQUIRE(d.ok());
  REQUIRE(d->StepSeconds(8, 0) == Approx(0.006));
  REQUIRE(d->StepSeconds(100, 7) == Approx(0.052));
}

TEST_CASE("the step is paced on the injected clock: the worker waits out what compute left", "[emulated_device]") {
  FakeClock clock;
  auto d = *EmulatedDevice::Parse("10:1", 1);  // 10 ms + 1 ms per sample
  const absl::Time started = clock.Now();
  clock.Advance(absl::Milliseconds(5));  // the real forward + backward took 5 ms
  PacedStep s = d.Pace(clock, started, 20, 0);
  REQUIRE(s.emulated_seconds == Approx(0.030));
  REQUIRE(s.real_seconds == Approx(0.005));
  REQUIRE_FALSE(s.overrun);
  REQUIRE(clock.Now() - started == absl::Milliseconds(30));  // the step ends at its emulated time

  // Real compute longer than the emulated time: no wait, and the step is flagged.
  const absl::Time again = clock.Now();
  clock.Advance(absl::Milliseconds(50));
  s = d.Pace(clock, again, 20, 0);
  REQUIRE(s.overrun);
  REQUIRE(s.real_seconds == Approx(0.050));
  REQUIRE(clock.Now() - again == absl::Milliseconds(50));
}

TEST_CASE("jitter is a normal factor of the given relative deviation, seeded", "[emulated_device]") {
  auto d = *EmulatedDevice::Parse("0:1:0.05", 7);
  double sum = 0, sum2 = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double r = d.StepSeconds(1000, 0);  // 1 s nominal
    sum += r;
    sum2 += r * r;
  }
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  REQUIRE(mean == Approx(1.0).epsilon(0.005));
  REQUIRE(sd == Approx(0.05).epsilon(0.05));
  // The same seed draws the same steps; another seed others.
  auto a = *EmulatedDevice::Parse("0:1:0.05", 3), b = *EmulatedDevice::Parse("0:1:0.05", 3),
       c = *EmulatedDevice::Parse("0:1:0.05", 4);
  const double x = a.StepSeconds(100, 0);
  REQUIRE(x == b.StepSeconds(100, 0));
  REQUIRE(x != c.StepSeconds(100, 0));
}

TEST_CASE("a schedule changes the profile with the global epoch", "[emulated_device]") {
  auto d = EmulatedDevice::Parse("0@2:0.5,1.5@2:4:0.05,3@1:1", 1);
  REQUIRE(d.ok());
  REQUIRE(d->At(0) == DeviceProfile{2, 0.5, 0});
  REQUIRE(d->At(1.49) == DeviceProfile{2, 0.5, 0});
  REQUIRE(d->At(1.5) == DeviceProfile{2, 4, 0.05});
  REQUIRE(d->At(100) == DeviceProfile{1, 1, 0});
  REQUIRE(d->StepSeconds(10, 3.2) == Approx(0.011));
}

TEST_CASE("malformed emulated devices are refused with the expected form", "[emulated_device]") {
  for (const char* bad : {"", "2", "2:x", "2:0.5:0.05:1", "-1:0.5", "0:0", "1:1:0.5", "1:1:-0.1", "inf:1", "1@2:0.5",
                          "0@2:0.5,0@2:1", "0@2:0.5,1@", "0@2:0.5,x@1:1", "0@2:0.5,", "nan:1"}) {
    INFO(bad);
    auto d = EmulatedDevice::Parse(bad, 1);
    REQUIRE(d.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(d.status().message().find("emulate_device") != absl::string_view::npos);
  }
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
