#include "server/data/arrival_sum.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

using Member = ReplicatedStep::Member;

// Reserves, adds and finishes `id`'s slice; whether it was added.
bool Arrive(ArrivalSum& sum, WorkerId id, uint64_t version, double weight, const std::vector<float>& slice) {
  if (!sum.Reserve(id, version, weight, static_cast<int64_t>(slice.size()))) return false;
  sum.Add(id, slice, weight);
  sum.Done();
  return true;
}

TEST_CASE("the step takes the sum built on arrival when it took exactly the slices summed", "[arrival_sum]") {
  ArrivalSum sum;
  REQUIRE(Arrive(sum, 1, 7, 2, {1, 2, 3}));
  REQUIRE(Arrive(sum, 2, 7, 1, {10, 20, 30}));
  REQUIRE_FALSE(Arrive(sum, 2, 7, 1, {10, 20, 30}));  // a resent slice is not added twice
  REQUIRE(sum.idle());
  const std::vector<float>* s = sum.Close(7, {{1, 7, 2}, {2, 7, 1}});
  REQUIRE(s != nullptr);
  REQUIRE(*s == std::vector<float>{12, 24, 36});
  REQUIRE_FALSE(Arrive(sum, 3, 7, 1, {1, 1, 1}));  // closed: its step is taken
  // The next version starts empty.
  REQUIRE(Arrive(sum, 1, 8, 1, {1, 1, 1}));
  REQUIRE(*sum.Close(8, {{1, 8, 1}}) == std::vector<float>{1, 1, 1});
}

TEST_CASE("a step whose members are not the slices summed, with their weights, sums its own", "[arrival_sum]") {
  const std::vector<float> a{1, 2}, b{3, 4};
  auto arrived = [&] {
    ArrivalSum sum;
    Arrive(sum, 1, 0, 1, a);
    Arrive(sum, 2, 0, 1, b);
    return sum;
  };
  std::vector<std::pair<std::vector<Member>, const char*>> steps = {
      {{{1, 0, 1}}, "a member left out"},
      {{{1, 0, 1}, {2, 0, 2}}, "another weight (--aggregation=mean's, or a batch changed)"},
      {{{1, 0, 1}, {2, 0, 1}, {3, 0, 1}}, "a member not summed"},
      {{{1, 0, 1}, {2, 1, 1}}, "another version"},
      {{}, "no member"},
  };
  for (const auto& [members, what] : steps) {
    INFO(what);
    ArrivalSum sum = arrived();
    REQUIRE(sum.Close(0, members) == nullptr);
  }
  ArrivalSum sum = arrived();
  REQUIRE(sum.Close(1, {{1, 1, 1}}) == nullptr);  // a version nothing arrived for
  // The step's own sum, in place of the arrivals'.
  REQUIRE(sum.SumOf({{a, 2}, {b, 1}}, 2) == std::vector<float>{5, 8});
}

TEST_CASE("a slice of another version while one is being added is not summed on arrival", "[arrival_sum]") {
  ArrivalSum sum;
  REQUIRE(sum.Reserve(1, 0, 1, 2));        // its Add in flight
  REQUIRE_FALSE(sum.Reserve(2, 1, 1, 2));  // would rewrite the storage under it
  sum.Add(1, std::vector<float>{1, 1}, 1);
  sum.Done();
  REQUIRE(sum.Reserve(2, 1, 1, 2));  // idle: the new version starts
}

TEST_CASE("after Forget (a restore to the same version), the slices summed before do not count", "[arrival_sum]") {
  ArrivalSum sum;
  REQUIRE(Arrive(sum, 1, 3, 1, {5, 5}));
  sum.Forget();
  REQUIRE(Arrive(sum, 2, 3, 1, {1, 2}));  // a new session's slice of the restored version 3
  REQUIRE(*sum.Close(3, {{2, 3, 1}}) == std::vector<float>{1, 2});
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
