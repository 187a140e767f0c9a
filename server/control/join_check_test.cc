#include "server/control/join_check.h"

#include <string>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

ModelLayout Layout(int64_t n) { return *ModelLayout::Create({TensorSpec{"w", {n}}}); }

TEST_CASE("a join's header: name, host, a layout within the server's size", "[join_check]") {
  const ModelLayout small = Layout(4);
  REQUIRE(CheckJoinHeader("gpu-0.a_b:c@d", "host-1", small, 1 << 20).ok());
  REQUIRE(CheckJoinHeader("", "h", small, 1 << 20).code() == absl::StatusCode::kInvalidArgument);
  const absl::Status bad = CheckJoinHeader("a b", "h", small, 1 << 20);
  REQUIRE(absl::StrContains(bad.message(), "'a b' is not 1-128 characters"));
  REQUIRE_FALSE(CheckJoinHeader(std::string(129, 'a'), "h", small, 1 << 20).ok());
  REQUIRE_FALSE(CheckJoinHeader("w", "a host", small, 1 << 20).ok());
  REQUIRE_FALSE(CheckJoinHeader("w", "h", ModelLayout(), 1 << 20).ok());
  const absl::Status big = CheckJoinHeader("w", "h", small, 15);  // 16 bytes > 15
  REQUIRE(big.code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(absl::StrContains(big.message(), "--max_model_bytes=15"));
}

TEST_CASE("a join's data set: bounded, and the job's once it assigns samples", "[join_check]") {
  REQUIRE(CheckJoinDataset(0, std::nullopt).ok());
  REQUIRE(CheckJoinDataset(60000, std::nullopt).ok());  // the first to bring one sets the job's
  REQUIRE_FALSE(CheckJoinDataset((uint64_t{1} << 32) + 1, std::nullopt).ok());
  REQUIRE(CheckJoinDataset(60000, 60000).ok());
  REQUIRE(absl::StrContains(CheckJoinDataset(0, 60000).message(), "dataset_size=60000"));
  REQUIRE(absl::StrContains(CheckJoinDataset(50000, 60000).message(), "has 50000 samples, the job's has 60000"));
}

TEST_CASE("a join's sample count: with a data set, bounded, the job's once one was given", "[join_check]") {
  REQUIRE(CheckJoinJobSamples(0, 0, 0).ok());           // stops by its iterations
  REQUIRE(CheckJoinJobSamples(0, 60000, 120000).ok());  // ...in a job that ends on a count
  REQUIRE(CheckJoinJobSamples(120000, 60000, 0).ok());  // the first to give one sets the job's
  REQUIRE(CheckJoinJobSamples(120000, 60000, 120000).ok());
  REQUIRE(absl::StrContains(CheckJoinJobSamples(120000, 0, 0).message(), "data set's size"));
  REQUIRE_FALSE(CheckJoinJobSamples((uint64_t{1} << 48) + 1, 60000, 0).ok());
  const absl::Status other = CheckJoinJobSamples(60000, 60000, 120000);
  REQUIRE(other.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE_FALSE(AsksForModel(other));
  REQUIRE(absl::StrContains(other.message(), "would train 60000 samples in all, the job trains 120000"));
}

TEST_CASE("a join's model: the first brings it, later ones the same, an untrained one may be replaced",
          "[join_check]") {
  const ModelLayout a = Layout(4), b = Layout(6);
  REQUIRE(CheckJoinModel(a, /*brings_parameters=*/true, nullptr, false).ok());
  REQUIRE(AsksForModel(CheckJoinModel(a, false, nullptr, false)));
  REQUIRE(CheckJoinModel(a, false, &a, false).ok());
  const absl::Status other = CheckJoinModel(b, true, &a, /*replaceable=*/false);
  REQUIRE(other.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(other.message(), "model layout differs"));
  REQUIRE(CheckJoinModel(b, true, &a, /*replaceable=*/true).ok());
  const absl::Status no_values = CheckJoinModel(b, false, &a, true);
  REQUIRE(AsksForModel(no_values));
  // Another refusal of the same code does not ask for the model.
  REQUIRE_FALSE(AsksForModel(absl::FailedPreconditionError("the server has no model yet")));
  REQUIRE(absl::StrContains(no_values.message(), "send parameters to replace it"));
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
