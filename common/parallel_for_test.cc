#include "common/parallel_for.h"

#include <atomic>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace {

// Every element is visited exactly once, by ranges of at least the grain.
void CheckCovers(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> seen(n);
  std::atomic<int> ranges{0};
  std::atomic<bool> small{false};
  ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    ++ranges;
    if (e - b < grain && !(b == 0 && e == n)) small = true;
    for (int64_t i = b; i < e; ++i) ++seen[i];
  });
  for (int64_t i = 0; i < n; ++i) REQUIRE(seen[i] == 1);
  CHECK_FALSE(small);
  CHECK(ranges == (n == 0 ? 0 : ParallelParts(n, grain)));
}

TEST_CASE("ParallelFor covers the range once, in ranges of at least the grain", "[parallel_for]") {
  for (int64_t n : {0, 1, 7, 100, 1000, 4096, 100000}) {
    for (int64_t grain : {1, 10, 1000, 1 << 20}) CheckCovers(n, grain);
  }
  CHECK(ParallelParts(100, 1000) == 1);  // below two grains: inline
  CHECK(ParallelParts(1 << 20, 1) ==
        static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency()))));
}

TEST_CASE("ParallelFor from several threads at once", "[parallel_for]") {
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) {
        ParallelFor(10000, 100, [&](int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (auto& t : callers) t.join();
  CHECK(total == 4 * 50 * 10000);
}

}  // namespace
}  // namespace omnilearn
