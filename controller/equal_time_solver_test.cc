#include "controller/equal_time_solver.h"

#include <catch2/catch.hpp>

namespace omnilearn {
namespace controller {
namespace {

TimeModel Model(double a, double c) { return TimeModel{a, c, true, 0}; }

int64_t Sum(const std::map<WorkerId, int64_t>& batches) {
  int64_t s = 0;
  for (const auto& [id, b] : batches) s += b;
  return s;
}

TEST_CASE("the global batch is clamped to what the bounds allow", "[solver]") {
  const Bounds bounds = {{1, {2, 10}}, {2, {3, 20}}};
  REQUIRE(FeasibleTotal(16, bounds) == 16);
  REQUIRE(FeasibleTotal(1, bounds) == 5);
  REQUIRE(FeasibleTotal(100, bounds) == 30);
}

TEST_CASE("equal-time batches are proportional to speed and sum to the total", "[solver]") {
  // Worker 2 is three times as fast per sample: it gets three times the batch.
  const std::map<WorkerId, TimeModel> models = {{1, Model(0, 0.03)}, {2, Model(0, 0.01)}};
  const Bounds bounds = {{1, {1, 256}}, {2, {1, 256}}};
  const std::map<WorkerId, int64_t> b = SolveEqualTime(models, bounds, 256);
  REQUIRE(b.at(1) == 64);
  REQUIRE(b.at(2) == 192);
  REQUIRE(Spread(models, b) == Approx(1.0));
}

TEST_CASE("a fixed part per iteration costs its worker samples", "[solver]") {
  const std::map<WorkerId, TimeModel> models = {{1, Model(0.5, 0.01)}, {2, Model(0, 0.01)}};
  const Bounds bounds = {{1, {1, 200}}, {2, {1, 200}}};
  const std::map<WorkerId, int64_t> b = SolveEqualTime(models, bounds, 200);
  REQUIRE(Sum(b) == 200);
  REQUIRE(b.at(1) == 75);  // 0.5 + 0.75 = 1.25 = 125 x 0.01
  REQUIRE(b.at(2) == 125);
}

TEST_CASE("a worker at its ceiling keeps it and the rest is balanced among the others", "[solver]") {
  const std::map<WorkerId, TimeModel> models = {{1, Model(0, 0.001)}, {2, Model(0, 0.01)}, {3, Model(0, 0.01)}};
  const Bounds bounds = {{1, {1, 50}}, {2, {1, 300}}, {3, {1, 300}}};
  const std::map<WorkerId, int64_t> b = SolveEqualTime(models, bounds, 250);
  REQUIRE(b.at(1) == 50);
  REQUIRE(b.at(2) == 100);
  REQUIRE(b.at(3) == 100);
}

TEST_CASE("rounding hands out the remainder by the largest fractions, within bounds", "[solver]") {
  const Bounds bounds = {{1, {1, 100}}, {2, {1, 100}}, {3, {1, 4}}};
  const std::map<WorkerId, int64_t> up = RoundToTotal({{1, 3.2}, {2, 3.7}, {3, 3.9}}, bounds, 12);
  REQUIRE(up == std::map<WorkerId, int64_t>{{1, 4}, {2, 4}, {3, 4}});
  // Clamped and floored: 5 + 5 + 4 = 14; one sample back, from the smallest remainder (5.2's).
  const std::map<WorkerId, int64_t> down = RoundToTotal({{1, 5.2}, {2, 5.7}, {3, 9.0}}, bounds, 13);
  REQUIRE(down == std::map<WorkerId, int64_t>{{1, 4}, {2, 5}, {3, 4}});
}

TEST_CASE("the spread counts measured workers only", "[solver]") {
  std::map<WorkerId, TimeModel> models = {{1, Model(0, 0.01)}, {2, Model(0, 0.02)}, {3, TimeModel{0, 1, false, 0}}};
  REQUIRE(Spread(models, {{1, 10}, {2, 10}, {3, 1000}}) == Approx(2.0));
  REQUIRE(Spread(models, {{1, 10}, {3, 1000}}) == 1.0);
}

}  // namespace
}  // namespace controller
}  // namespace omnilearn
