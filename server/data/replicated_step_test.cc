#include "server/data/replicated_step.h"

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

}  // namespace
}  // namespace server
}  // namespace omnilearn
