#include "common/flag_checks.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace {

TEST_CASE("range checks name the flag and its range", "[flags]") {
  REQUIRE(CheckFlagRanges({{"port", 50051, 1, 65535}, {"epochs", 0.5, 0, 1e6}}).ok());
  absl::Status s = CheckFlagRanges({{"port", 99999, 1, 65535}});
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(s.message() == "--port must be in [1, 65535], got 99999");
  REQUIRE(CheckFlagRanges({{"epochs", -1, 0, 1e6}}).message() == "--epochs must be in [0, 1e+06], got -1");
  REQUIRE_FALSE(CheckFlagRanges({{"lr", NAN, 0, 10}}).ok());
}

}  // namespace
}  // namespace omnilearn
