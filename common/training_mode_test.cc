#include "common/training_mode.h"

#include <string>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace {

TEST_CASE("modes parse from their names, case-insensitively, and nothing else parses") {
  for (Mode m : {Mode::kSync, Mode::kAsync, Mode::kSsp}) {
    REQUIRE(*ParseMode(ModeName(m)) == m);
  }
  REQUIRE(*ParseMode("SSP") == Mode::kSsp);
  const auto bad = ParseMode("bsp");
  REQUIRE_FALSE(bad.ok());
  REQUIRE(std::string(bad.status().message()).find("'bsp'") != std::string::npos);
}

TEST_CASE("a round of local steps: H steps, or steps of about b samples, never more steps than samples") {
  CHECK(LocalRoundSteps(96, 1, 0) == 1);   // no local steps: the batch is one step
  CHECK(LocalRoundSteps(96, 8, 0) == 8);   // --local_steps=8
  CHECK(LocalRoundSteps(5, 8, 0) == 5);    // fewer samples than steps: one sample each
  CHECK(LocalRoundSteps(96, 1, 32) == 3);  // --local_batch=32
  CHECK(LocalRoundSteps(97, 1, 32) == 4);  // the rest is a step of its own
  CHECK(LocalRoundSteps(10, 1, 32) == 1);  // a batch smaller than a step is one
  CHECK(LocalRoundSteps(0, 8, 0) == 1);    // an empty batch (an idle worker's) still one
}

}  // namespace
}  // namespace omnilearn
