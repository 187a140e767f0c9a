#include "worker/devices/slowdown.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("a slowdown schedule gives each global epoch its factor", "[slowdown]") {
  auto s = SlowdownSchedule::Parse("1:2,2:8,3.5:4", 1.5);
  REQUIRE(s.ok());
  REQUIRE(s->At(0) == 1.5);  // before the first entry: --slowdown
  REQUIRE(s->At(1) == 2);
  REQUIRE(s->At(2.9) == 8);
  REQUIRE(s->At(3.5) == 4);
  REQUIRE(s->At(100) == 4);
  REQUIRE(SlowdownSchedule::Parse("", 3)->At(7) == 3);
  REQUIRE(SlowdownSchedule::Parse("", 3)->constant());
  for (const char* bad : {"1", "a:2", "1:0.5", "2:2,1:3", "-1:2", "1:2,1:3", "1:2,"}) {
    INFO(bad);
    REQUIRE(SlowdownSchedule::Parse(bad, 1).status().code() == absl::StatusCode::kInvalidArgument);
  }
  REQUIRE(SlowdownSchedule::Parse("", 0.5).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
