#include "controller/plan_trial.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace controller {
namespace {

using Verdict = PlanTrial::Verdict;
const PlanTrial::Plan kOld = {{0, 209}, {1, 47}};
const PlanTrial::Plan kNew = {{0, 173}, {1, 83}};

TEST_CASE("a new plan that delivers what the old one did stays", "[plan_trial]") {
  PlanTrial t;
  for (double x : {5000.0, 5100.0, 4900.0}) REQUIRE(t.Measured(x, 0.05) == Verdict::kNone);
  t.Replaced(kOld, kNew);
  REQUIRE(t.on_trial());
  REQUIRE(t.Measured(4800, 0.05) == Verdict::kNone);  // 4% under the median 5000: noise
  REQUIRE_FALSE(t.on_trial());
}

TEST_CASE("a new plan that delivers less is judged worse, against the old plan's median", "[plan_trial]") {
  PlanTrial t;
  // The old plan's windows, the last one a burst: the median leaves it out.
  for (double x : {5000.0, 5050.0, 4950.0, 2500.0}) REQUIRE(t.Measured(x, 0.05) == Verdict::kNone);
  t.Replaced(kOld, kNew);
  REQUIRE(t.Measured(3000, 0.05) == Verdict::kWorse);
  REQUIRE(t.previous() == kOld);
  REQUIRE_FALSE(t.on_trial());
  // Reverted: the old plan's record is what it measured; a later change is judged against it.
  t.Reverted();
  t.Replaced(kNew, kOld);
  REQUIRE(t.Measured(4700, 0.05) == Verdict::kWorse);
  // Kept: the new plan's record starts with its judged window.
  t.Kept();
  t.Replaced(kOld, kNew);
  REQUIRE(t.Measured(4600, 0.05) == Verdict::kNone);
}

TEST_CASE("a small correction is no trial, and the old plan's own noise widens the margin", "[plan_trial]") {
  PlanTrial t;
  t.Measured(5000, 0.05);
  t.Replaced({{0, 26}, {1, 6}}, {{0, 25}, {1, 7}});  // one sample: within the noise
  REQUIRE_FALSE(t.on_trial());
  // Windows 10% apart: three times their spread is the margin, not the 5% given.
  for (double x : {4500.0, 5500.0, 5000.0}) t.Measured(x, 0.05);
  t.Replaced(kOld, kNew);
  REQUIRE(t.Measured(4300, 0.05) == Verdict::kNone);  // 14% under the median: noise here
  PlanTrial steady;
  for (double x : {5000.0, 5010.0, 4990.0}) steady.Measured(x, 0.05);
  steady.Replaced(kOld, kNew);
  REQUIRE(steady.Measured(4300, 0.05) == Verdict::kWorse);  // these windows agree within 0.2%
}

TEST_CASE("no trial without a measured plan, none across a change of workers", "[plan_trial]") {
  PlanTrial t;
  t.Replaced(kOld, kNew);
  REQUIRE_FALSE(t.on_trial());
  t.Measured(5000, 0.05);
  t.Replaced(kOld, kNew);
  REQUIRE(t.on_trial());
  t.Reset();
  REQUIRE_FALSE(t.on_trial());
  REQUIRE(t.Measured(100, 0.05) == Verdict::kNone);
}

}  // namespace
}  // namespace controller
}  // namespace omnilearn
