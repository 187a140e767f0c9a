#include "server/data/replicated_step.h"

#include <utility>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

using Members = std::vector<ReplicatedStep::Member>;

TEST_CASE("a step history is the same for the same members in any order", "[replicated_step]") {
  const Members ab = {{1, 7, 0.25}, {2, 7, 0.75}};
  const Members ba = {{2, 7, 0.75}, {1, 7, 0.25}};
  CHECK(ExtendHistory(0, 7, ab) == ExtendHistory(0, 7, ba));
  CHECK(ExtendHistory(0, 7, ab) != 0);
  // A known value: the digest is a format (checkpoints and peers compare it across
  // processes and releases), not an implementation detail (FNV-1a of three zero words,
  // computed apart from this code).
  CHECK(ExtendHistory(0, 0, {}) == 0x81d23fd7003c2305ULL);
}

TEST_CASE("a step history tells apart every field of every step", "[replicated_step]") {
  const Members ab = {{1, 7, 0.25}, {2, 7, 0.75}};
  const uint64_t h = ExtendHistory(42, 7, ab);
  CHECK(h != ExtendHistory(43, 7, ab));                            // the history before
  CHECK(h != ExtendHistory(42, 8, ab));                            // the version
  CHECK(h != ExtendHistory(42, 7, {{1, 7, 0.25}}));                // a member left out
  CHECK(h != ExtendHistory(42, 7, {{1, 7, 0.25}, {3, 7, 0.75}}));  // another member
  CHECK(h != ExtendHistory(42, 7, {{1, 7, 0.25}, {2, 6, 0.75}}));  // a gradient of another version
  CHECK(h != ExtendHistory(42, 7, {{1, 7, 0.25}, {2, 7, 0.5}}));   // another weight
  // Two steps' histories chain: the same steps in another order differ.
  const Members a = {{1, 0, 1}}, b = {{2, 1, 1}};
  CHECK(ExtendHistory(ExtendHistory(0, 0, a), 1, b) != ExtendHistory(ExtendHistory(0, 0, b), 1, a));
}

TEST_CASE("a sync round's mean scale is one over its members' weights", "[replicated_step]") {
  CHECK(MeanScale({{1, 0, 32}, {2, 0, 96}}) == 1.0 / 128);
  CHECK(MeanScale({}) == 0);
}

TEST_CASE("two steps are the same for the same members in any order, and differ in any member or scalar",
          "[replicated_step]") {
  ReplicatedStep a;
  a.version = 7;
  a.members = {{1, 7, 32}, {2, 7, 96}};
  a.settings.learning_rate = 0.1;
  a.settings.update_scale = 1.0 / 128;
  ReplicatedStep b = a;
  std::swap(b.members[0], b.members[1]);
  CHECK(SameStep(a, b));
  ReplicatedStep c = a;
  c.members[1].weight = 95;
  CHECK_FALSE(SameStep(a, c));
  c = a;
  c.members.pop_back();
  CHECK_FALSE(SameStep(a, c));
  c = a;
  c.members[0].model_version = 6;
  CHECK_FALSE(SameStep(a, c));
  c = a;
  c.settings.learning_rate = 0.05;
  CHECK_FALSE(SameStep(a, c));
  c = a;
  c.version = 8;
  CHECK_FALSE(SameStep(a, c));
  c = a;
  c.settings.update_scale = 1.0 / 127;
  CHECK_FALSE(SameStep(a, c));
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
