#include "common/shard_map.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace {

ModelLayout Layout(std::vector<TensorSpec> tensors) { return *ModelLayout::Create(std::move(tensors)); }

// A ResNet-like mix: a few large tensors, many small ones, buffers among them.
ModelLayout Mixed() {
  std::vector<TensorSpec> t;
  for (int i = 0; i < 12; ++i) {
    const int64_t c = 16 << (i / 4);
    t.push_back({"conv" + std::to_string(i) + ".weight", {c, c, 3, 3}});
    t.push_back({"bn" + std::to_string(i) + ".weight", {c}});
    t.push_back({"bn" + std::to_string(i) + ".running_mean", {c}, true});
  }
  t.push_back({"fc.weight", {1000, 512}});
  t.push_back({"fc.bias", {1000}});
  return Layout(t);
}

// Every element of the model lies in exactly one piece of one shard.
void RequireCoversOnce(const ModelLayout& layout, const ShardMap& map) {
  std::vector<int> hits(layout.total_elements(), 0);
  int64_t sum = 0;
  for (int s = 0; s < map.shards(); ++s) {
    int64_t n = 0;
    for (const ShardPiece& p : map.slice(s)) {
      REQUIRE(p.begin < p.end);
      REQUIRE(p.end <= layout.size(p.tensor));
      REQUIRE(p.flat == layout.offset(p.tensor) + p.begin);
      for (int64_t i = p.flat; i < p.flat + p.size(); ++i) ++hits[i];
      n += p.size();
    }
    REQUIRE(n == map.slice_elements(s));
    sum += n;
  }
  REQUIRE(sum == layout.total_elements());
  REQUIRE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
}

TEST_CASE("one shard holds the whole model, in layout order", "[shard_map]") {
  const ModelLayout layout = Mixed();
  const ShardMap map = *ShardMap::Plan(layout, 1);
  REQUIRE(map.shards() == 1);
  RequireCoversOnce(layout, map);
  int64_t next = 0;
  for (const ShardPiece& p : map.slice(0)) {
    REQUIRE(p.flat == next);
    next += p.size();
  }
}

TEST_CASE("the shards hold equal bytes, and no piece exceeds a partition", "[shard_map]") {
  const ModelLayout layout = Mixed();
  const int64_t partition_bytes = 64 << 10;
  for (int shards : {2, 3, 4, 7, 16}) {
    CAPTURE(shards);
    const ShardMap map = *ShardMap::Plan(layout, shards, partition_bytes);
    RequireCoversOnce(layout, map);
    int64_t lo = map.slice_elements(0), hi = lo;
    for (int s = 0; s < shards; ++s) {
      lo = std::min(lo, map.slice_elements(s));
      hi = std::max(hi, map.slice_elements(s));
      for (const ShardPiece& p : map.slice(s)) REQUIRE(p.size() * 4 <= partition_bytes);
    }
    // One element per partition of a shard at most: 40 MiB over 4 shards was 9.9, 12.1,
    // 10.0 and 9.9 MB when whole partitions were dealt largest first.
    REQUIRE(hi - lo <= map.partitions() / shards);
    REQUIRE(map.partitions() % shards == 0);
  }
}

TEST_CASE("partitions are near-equal runs of the flat model, cut at the tensors' bounds", "[shard_map]") {
  const ModelLayout layout = Layout({{"big", {1001}}, {"empty", {0}}, {"small", {3}}});
  const ShardMap map = *ShardMap::Plan(layout, 2, 400);  // 100 floats a partition
  RequireCoversOnce(layout, map);
  REQUIRE(map.partitions() == 12);  // 1004 elements: 6 per shard keep each within 100
  // 1004 = 12 x 83 + 8: partitions of 84 and 83 dealt alternately, so 502 each.
  REQUIRE(map.slice_elements(0) == 502);
  REQUIRE(map.slice_elements(1) == 502);
  // The last partition holds the end of "big" and all of "small": two pieces.
  const ShardPiece& last = map.slice(1).back();
  REQUIRE(layout.tensors()[last.tensor].name == "small");
  REQUIRE(last.size() == 3);
  const ShardPiece& before = map.slice(1)[map.slice(1).size() - 2];
  REQUIRE(before.tensor == 0);
  REQUIRE(before.end == 1001);
}

TEST_CASE("40 MiB over 4 shards: 10 MiB each", "[shard_map]") {
  const ModelLayout layout = Layout({{"a", {2500000}}, {"b", {2500000}}, {"c", {2500000}}, {"d", {2985760}}});
  const ShardMap map = *ShardMap::Plan(layout, 4);
  for (int s = 0; s < 4; ++s) REQUIRE(map.slice_elements(s) == 10485760 / 4);
}

TEST_CASE("a small model is cut finer so that every shard holds a part", "[shard_map]") {
  const ModelLayout layout = Layout({{"w", {10}}, {"b", {2}}});
  for (int shards : {2, 5, 12}) {
    const ShardMap map = *ShardMap::Plan(layout, shards);
    RequireCoversOnce(layout, map);
    for (int s = 0; s < shards; ++s) REQUIRE(map.slice_elements(s) > 0);
  }
}

TEST_CASE("gathering every shard's slice and scattering them back rebuilds the model", "[shard_map]") {
  const ModelLayout layout = Mixed();
  const ShardMap map = *ShardMap::Plan(layout, 3, 32 << 10);
  std::vector<float> model(layout.total_elements());
  std::iota(model.begin(), model.end(), 1.0f);
  std::vector<float> rebuilt(model.size(), 0.0f);
  for (int s = 0; s < 3; ++s) {
    std::vector<float> slice(map.slice_elements(s));
    map.Gather(s, model, absl::MakeSpan(slice));
    REQUIRE(slice.front() == model[map.slice(s).front().flat]);
    map.Scatter(s, slice, absl::MakeSpan(rebuilt));
  }
  REQUIRE(rebuilt == model);
}

TEST_CASE("the plan and its fingerprint depend on the layout, the shards and the partition size only", "[shard_map]") {
  const ShardMap a = *ShardMap::Plan(Mixed(), 4, 64 << 10);
  const ShardMap b = *ShardMap::Plan(Mixed(), 4, 64 << 10);
  REQUIRE(a.fingerprint() == b.fingerprint());
  for (int s = 0; s < 4; ++s) REQUIRE(a.slice(s) == b.slice(s));
  REQUIRE(ShardMap::Plan(Mixed(), 3, 64 << 10)->fingerprint() != a.fingerprint());
  REQUIRE(ShardMap::Plan(Mixed(), 4, 32 << 10)->fingerprint() != a.fingerprint());
  REQUIRE(ShardMap::Plan(Layout({{"w", {100}}}), 2)->fingerprint() !=
          ShardMap::Plan(Layout({{"v", {100}}}), 2)->fingerprint());
  REQUIRE(absl::StartsWith(a.DebugString(), "4 shards, "));
}

TEST_CASE("the automatic size: 16 partitions a shard, within 64 KiB and 4 MiB", "[shard_map]") {
  // 45 MB (ResNet-18's size) over 4 shards: 64 partitions of 0.7 MB, so that its last
  // stage's 33.6 MB spreads over all four (4 MB partitions put 9 of them on the shards
  // as 3, 2, 2, 2); over 16 shards, 256 of 0.18 MB.
  const ModelLayout resnet = Layout({{"w", {11'200'000}}});
  auto four = ShardMap::Plan(resnet, 4);
  REQUIRE(four.ok());
  CHECK(four->partitions() == 64);
  CHECK(absl::StrContains(four->DebugString(), "64 partitions of 0.70 MB"));
  CHECK(ShardMap::Plan(resnet, 16)->partitions() == 256);
  CHECK(four->fingerprint() == ShardMap::Plan(resnet, 4, ShardMap::kAutoPartitionBytes)->fingerprint());
  // A large model keeps partitions of 4 MiB at most: 1 GiB over 4 shards is 256 of them.
  CHECK(ShardMap::Plan(Layout({{"w", {int64_t{1} << 28}}}), 4)->partitions() == 256);
  // A small one keeps them at 64 KiB at least: 1 MiB over 4 shards is 16 of them, not 64.
  CHECK(ShardMap::Plan(Layout({{"w", {1 << 18}}}), 4)->partitions() == 16);
  // Smaller than a partition a shard: one each.
  CHECK(ShardMap::Plan(Layout({{"w", {1000}}}), 4)->partitions() == 4);
  // The automatic size is a plan of its own: not 4 MiB's.
  CHECK(four->fingerprint() != ShardMap::Plan(resnet, 4, ShardMap::kMaxAutoPartitionBytes)->fingerprint());
}

TEST_CASE("a slice's layout names each piece once and keeps buffers", "[shard_map]") {
  const ModelLayout layout = Mixed();
  auto map = ShardMap::Plan(layout, 3, 64 << 10);
  REQUIRE(map.ok());
  for (int s = 0; s < 3; ++s) {
    const ModelLayout& slice = map->slice_layout(s);
    REQUIRE(slice.total_elements() == map->slice_elements(s));
    REQUIRE(slice.tensors().size() == map->slice(s).size());
    for (size_t i = 0; i < slice.tensors().size(); ++i) {
      const ShardPiece& p = map->slice(s)[i];
      REQUIRE(slice.tensors()[i].name == layout.tensors()[p.tensor].name + "@" + std::to_string(p.begin));
      REQUIRE(slice.is_buffer(static_cast<int>(i)) == layout.is_buffer(p.tensor));
    }
  }
}

TEST_CASE("a map of whole tensors cuts none, keeps their shapes and balances the shards", "[shard_map]") {
  const ModelLayout layout = Mixed();
  const ShardMap map = *ShardMap::Plan(layout, 3, ShardMap::kAutoPartitionBytes, /*whole_tensors=*/true);
  REQUIRE(map.whole_tensors());
  RequireCoversOnce(layout, map);
  int64_t largest = 0;
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) largest = std::max(largest, layout.size(t));
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < map.slice(s).size(); ++i) {
      const ShardPiece& p = map.slice(s)[i];
      REQUIRE((p.begin == 0 && p.end == layout.size(p.tensor)));  // whole
      if (i > 0) REQUIRE(map.slice(s)[i - 1].tensor < p.tensor);  // layout order
      REQUIRE(map.slice_layout(s).tensors()[i].shape == layout.tensors()[p.tensor].shape);
    }
    // Largest first to the least loaded: no shard holds more than another by a tensor's size.
    for (int o = 0; o < 3; ++o) REQUIRE(map.slice_elements(s) - map.slice_elements(o) <= largest);
  }
  REQUIRE(map.fingerprint() != ShardMap::Plan(layout, 3)->fingerprint());
  const auto two = ShardMap::Plan(Layout({{"a", {4, 4}}, {"b", {4}}}), 3, 0, true);
  REQUIRE(absl::StrContains(two.status().message(), "2 tensors, fewer than the 3 shards"));
}

TEST_CASE("a plan that cannot be made is a clear error", "[shard_map]") {
  const ModelLayout layout = Layout({{"w", {3}}});
  const auto zero = ShardMap::Plan(layout, 0);
  REQUIRE(absl::IsInvalidArgument(zero.status()));
  REQUIRE(absl::StrContains(zero.status().message(), "want 1 to 1024"));
  REQUIRE(absl::IsInvalidArgument(ShardMap::Plan(layout, 1, 3).status()));
  REQUIRE(absl::StrContains(ShardMap::Plan(layout, 1, -4).status().message(), "or 0 for a size chosen"));
  const auto too_many = ShardMap::Plan(layout, 4);
  REQUIRE(absl::IsInvalidArgument(too_many.status()));
  REQUIRE(absl::StrContains(too_many.status().message(), "fewer than the 4 shards"));
}

}  // namespace
}  // namespace omnilearn
