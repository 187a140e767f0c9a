#include "server/data/round_sum.h"

#include <thread>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a round's sum: the first add writes, later ones add, storage kept", "[round_sum]") {
  RoundSum sum;
  const int64_t n = RoundSum::kStripeElements * 2 + 5;  // three stripes, the last short
  sum.Start(n);
  sum.Add(std::vector<float>(n, 1.0f), 2.0f, 0);
  sum.Add(std::vector<float>(n, 0.5f), 4.0f, 1);
  for (int64_t i : {int64_t{0}, RoundSum::kStripeElements, n - 1}) REQUIRE(sum.values()[i] == 4.0f);
  // A new round: whatever the storage held is overwritten, not added to.
  sum.Start(n);
  sum.Add(std::vector<float>(n, 3.0f), 1.0f, 2);
  for (int64_t i : {int64_t{0}, RoundSum::kStripeElements + 1, n - 1}) REQUIRE(sum.values()[i] == 3.0f);
  sum.Release();
  REQUIRE(sum.values().empty());
}

TEST_CASE("adds from several threads at once make the serial sum", "[round_sum]") {
  RoundSum sum;
  const int64_t n = RoundSum::kStripeElements * 5 + 3;
  sum.Start(n);
  constexpr int kThreads = 8;
  std::vector<std::vector<float>> grads;
  for (int t = 0; t < kThreads; ++t) {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = static_cast<float>((i + t) % 7);  // small integers: exact sums
    grads.push_back(std::move(g));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { sum.Add(grads[t], static_cast<float>(t + 1), RoundSum::RotationFor(t)); });
  }
  for (auto& th : threads) th.join();
  for (int64_t i = 0; i < n; ++i) {
    float expected = 0;
    for (int t = 0; t < kThreads; ++t) expected += static_cast<float>(t + 1) * grads[t][i];
    if (sum.values()[i] != expected) FAIL("element " << i << ": " << sum.values()[i] << " != " << expected);
  }
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
