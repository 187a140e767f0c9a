#include "server/summary.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("the progress line's rate is of the samples since the last line", "[summary]") {
  ServerSnapshot s;
  s.dataset_size = 1000;
  s.global_samples = 1500;
  s.version = 40;
  const std::string line = ProgressLine(s, 500, absl::Seconds(10));
  INFO(line);
  REQUIRE(absl::StrContains(line, "epoch 1.50 |"));
  REQUIRE(absl::StrContains(line, " 100 samples/s |"));
}

TEST_CASE("after the job went back to a checkpoint the line says so, not a rate of 1.8e19", "[summary]") {
  ServerSnapshot s;
  s.global_samples = 1200;
  const std::string line = ProgressLine(s, 1500, absl::Seconds(10));
  INFO(line);
  REQUIRE(absl::StrContains(line, "went back 300 samples to a checkpoint"));
  REQUIRE_FALSE(absl::StrContains(line, "samples/s"));
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
