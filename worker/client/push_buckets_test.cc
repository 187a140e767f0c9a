#include "worker/client/push_buckets.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

ModelLayout Layout() { return *ModelLayout::Create({{"a", {1024}}, {"b", {256}}, {"c", {256}}, {"d", {512}}}); }

TEST_CASE("buckets are cut last tensor first, about bucket_bytes each", "[buckets]") {
  // Bytes: a 4096, b 1024, c 1024, d 2048. Buckets of 3 KiB: {d, c} (3072), {b} ({b, a}
  // would be 5 KiB), {a}.
  PushBuckets buckets(Layout(), 3072);
  REQUIRE(buckets.buckets() == 3);
  REQUIRE(buckets.bucket_of(3) == 0);
  REQUIRE(buckets.bucket_of(2) == 0);
  REQUIRE(buckets.bucket_of(1) == 1);
  REQUIRE(buckets.bucket_of(0) == 2);
  // A tensor larger than a bucket is a bucket of its own; one huge bucket holds all.
  REQUIRE(PushBuckets(Layout(), 1).buckets() == 4);
  REQUIRE(PushBuckets(Layout(), int64_t{1} << 30).buckets() == 1);
}

TEST_CASE("a bucket leaves once all its tensors are final, each tensor once", "[buckets]") {
  PushBuckets buckets(Layout(), 3072);
  REQUIRE(buckets.Ready(3).empty());  // c still missing
  REQUIRE(buckets.Ready(3).empty());  // repeated: harmless
  REQUIRE(buckets.Ready(2) == std::vector<int>{3, 2});
  REQUIRE(buckets.Ready(0) == std::vector<int>{0});  // out of order: its own bucket is whole
  REQUIRE(buckets.Ready(7).empty());                 // not a tensor
  REQUIRE(buckets.Ready(0).empty());                 // its bucket left already
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
