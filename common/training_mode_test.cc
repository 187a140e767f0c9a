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

}  // namespace
}  // namespace omnilearn
