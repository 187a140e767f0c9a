#include "common/model_layout.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace {

TEST_CASE("a layout difference names only the tensors that differ", "[layout]") {
  std::vector<TensorSpec> many;
  for (int i = 0; i < 50; ++i) many.push_back({"layer" + std::to_string(i) + ".weight", {8, 8}});
  std::vector<TensorSpec> mine = many, server = many;
  mine[3].shape = {8, 9};
  mine.push_back({"extra.bias", {8}});
  server.push_back({"bn.running_mean", {8}, true});
  const std::string d = ModelLayout::Create(mine)->DescribeDifference(*ModelLayout::Create(server));
  CAPTURE(d);
  REQUIRE(absl::StartsWith(d, "3 tensors differ: "));
  REQUIRE(absl::StrContains(d, "'layer3.weight' is [8,9] here, [8,8] on the server"));
  REQUIRE(absl::StrContains(d, "'extra.bias' [8] is not in the server's model"));
  REQUIRE(absl::StrContains(d, "'bn.running_mean' [8] (buffer) is missing here"));
  REQUIRE_FALSE(absl::StrContains(d, "layer4"));  // the 49 that match are not listed
  const std::string limited = ModelLayout::Create(mine)->DescribeDifference(*ModelLayout::Create(server), 1);
  REQUIRE(absl::StrContains(limited, "; and 2 more"));
}

TEST_CASE("a model goes to a worker with its small buffers first", "[layout]") {
  // Two parameters of 1000 values, BatchNorm's statistics of 4 and its count: 9 of 2009 values.
  std::vector<TensorSpec> bn = {{"conv.weight", {100, 10}},
                                {"fc.weight", {100, 10}},
                                {"bn.running_mean", {4}, true},
                                {"bn.running_var", {4}, true},
                                {"bn.num_batches_tracked", {}, true}};
  REQUIRE(ModelLayout::Create(bn)->SendOrder() == std::vector<int>{2, 3, 4, 0, 1});
  // Buffers of more than 1/32 of the values stay last: they would hold up the first layers.
  std::vector<TensorSpec> big = bn;
  big[2].shape = {100};
  REQUIRE(ModelLayout::Create(big)->SendOrder() == std::vector<int>{0, 1, 2, 3, 4});
  // No buffers: the layout's order.
  REQUIRE(ModelLayout::Create({bn[0], bn[1]})->SendOrder() == std::vector<int>{0, 1});
}

}  // namespace
}  // namespace omnilearn
