#include "server/control/sync_round.h"

#include <cmath>

#include "catch2/catch.hpp"
#include "server/control/async_rule.h"
#include "server/control/training_stats.h"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a round sums b * g, reuses its storage, and tells members the closed plan", "[round]") {
  SyncRound r;
  const absl::Time t0 = absl::UnixEpoch();
  REQUIRE_FALSE(r.open());
  r.Open(t0, absl::Seconds(10), 3);
  r.Open(t0 + absl::Seconds(5), absl::Seconds(10), 3);  // already open: the clock stays
  REQUIRE(r.deadline() == t0 + absl::Seconds(10));
  r.Add(1, 2, 2, {1, 2, 3}, {SampleSpan{0, {7, 8}}});
  r.Add(2, 4, 4, {1, 1, 1}, {SampleSpan{0, {9, 10, 11, 12}}});
  REQUIRE(r.sum() == std::vector<float>{6, 8, 10});
  REQUIRE(r.samples() == 6);
  REQUIRE(CountSamples(r.sample_ids()) == 6);
  REQUIRE(r.Pushed(1));
  r.MarkPresent(3);
  r.Forget(2);
  const float* storage = r.sum().data();
  r.Close([](uint64_t id) { return static_cast<int64_t>(10 * id); });
  REQUIRE_FALSE(r.open());
  REQUIRE(r.batch_for(1) == 10);
  REQUIRE(r.batch_for(3) == 30);
  REQUIRE(r.batch_for(2) == -1);  // forgotten before the close
  REQUIRE(r.sample_ids().empty());
  // The next round's first push overwrites the old sum (no clearing), in the same storage.
  r.Open(t0 + absl::Seconds(20), absl::Seconds(10), 3);
  r.Add(1, 1, 1, {5, 5, 5}, {});
  REQUIRE(r.sum() == std::vector<float>{5, 5, 5});
  REQUIRE(r.sum().data() == storage);
}

TEST_CASE("the async rule damps only pushes staler than n workers in turn", "[async]") {
  // 4 live workers, each pushing a quarter of B = 64.
  StepSettings fresh = AsyncStepFor(16, 64, 4, 3, 0.9);
  REQUIRE(fresh.lr_scale == Approx(0.25));  // s = n - 1: not damped
  REQUIRE(fresh.buffer_blend == Approx(0.25));
  REQUIRE(*fresh.momentum == Approx(0.9 - 0.75));  // group 0's, for shards of an earlier release
  REQUIRE(fresh.momentum_cut == Approx(0.75));     // each group's own momentum lowered by it
  StepSettings stale = AsyncStepFor(16, 64, 4, 7, 0.9);
  REQUIRE(stale.lr_scale == Approx(0.25 * 4 / 8.0));
  REQUIRE_FALSE(AsyncStepFor(16, 64, 1, 0, 0.9).momentum.has_value());  // one worker: each group's own
  REQUIRE(AsyncStepFor(128, 64, 1, 0, 0.5).buffer_blend == 1.0);        // a share above B: capped
  REQUIRE(*AsyncStepFor(16, 64, 8, 0, 0.5).momentum == 0.0);            // never negative
  // The ablation's switches: equal shares instead of b/B; no damping, plain momentum.
  AsyncRuleOptions equal_share;
  equal_share.lr_scaling = false;
  REQUIRE(AsyncStepFor(48, 64, 4, 0, 0.9, equal_share).lr_scale == Approx(0.25));
  AsyncRuleOptions plain;
  plain.staleness_damping = false;
  const StepSettings undamped = AsyncStepFor(16, 64, 4, 7, 0.9, plain);
  REQUIRE(undamped.lr_scale == Approx(0.25));
  REQUIRE_FALSE(undamped.momentum.has_value());
  REQUIRE(undamped.momentum_cut == 0);
  // Adam's beta1 is lowered as SGD's momentum is (the caller passes it in its place).
  REQUIRE(*AsyncStepFor(32, 64, 2, 1, 0.9).momentum == Approx(0.4));
  // ...but not when the push was computed on predicted weights: the prediction takes the
  // staleness away, and with it the momentum it adds.
  const StepSettings predicted = AsyncStepFor(32, 64, 2, 1, 0.9, {}, true);
  REQUIRE_FALSE(predicted.momentum.has_value());
  REQUIRE(predicted.lr_scale == Approx(0.5));                                   // the rest as without it
  REQUIRE(AsyncStepFor(32, 64, 2, 3, 0.9, {}, true).lr_scale == Approx(0.25));  // stale pushes still damped
  // Adam's share of a global batch: b/B (capped at 1), 1/n with equal shares, 1 when off.
  REQUIRE(AsyncStepFor(16, 64, 4, 7, 0.9).sample_share == Approx(0.25));  // not damped: a share of samples
  REQUIRE(AsyncStepFor(128, 64, 1, 0, 0.9).sample_share == 1.0);
  REQUIRE(AsyncStepFor(48, 64, 4, 0, 0.9, equal_share).sample_share == Approx(0.25));
  AsyncRuleOptions full_steps;
  full_steps.adam_sqrt_scaling = false;
  REQUIRE(AsyncStepFor(16, 64, 4, 0, 0.9, full_steps).sample_share == 1.0);
}

TEST_CASE("the job's counters: samples, rounds, accuracy with its version, staleness clamped", "[stats]") {
  TrainingStats s;
  s.Trained(32, 0.5);
  s.Trained(16, 0.25);
  s.Round();
  s.Accuracy(0.875, 7, false);
  s.CountPush("applied");
  s.CountPush("applied");
  s.CountStaleness(3);
  s.CountStaleness(1000);  // into the last bucket
  REQUIRE(s.global_samples() == 48);
  REQUIRE(s.last_loss() == 0.25);
  REQUIRE(s.rounds() == 1);
  REQUIRE(*s.test_accuracy() == 0.875);
  REQUIRE(s.test_accuracy_version() == 7);
  REQUIRE(s.pushes_by_result().at("applied") == 2);
  REQUIRE(s.staleness_counts()[3] == 1);
  REQUIRE(s.staleness_counts().back() == 1);
  s.Restore(1000, 9);
  REQUIRE(s.global_samples() == 1000);
  REQUIRE(s.rounds() == 9);
}

TEST_CASE("weight prediction counts the other workers' steps in this push's step size and pace", "[async]") {
  // Two workers, 48 and 16 of B = 64, pushing in turn (equal intervals): Adam's steps are
  // sqrt(0.75) and sqrt(0.25) of a full one under the square-root rule.
  const StepSettings fast = AsyncStepFor(48, 64, 2, 1, 0.9);
  const StepSettings slow = AsyncStepFor(16, 64, 2, 1, 0.9);
  REQUIRE(PredictedSteps(fast, 1.0, {{16, 1.0}}, 64) == Approx(std::sqrt(0.25 / 0.75)));
  REQUIRE(PredictedSteps(slow, 1.0, {{48, 1.0}}, 64) == Approx(std::sqrt(0.75 / 0.25)));
  // Equal batches: one step per peer when the paces are equal or not measured yet (n - 1).
  const StepSettings quarter = AsyncStepFor(16, 64, 4, 3, 0.9);
  REQUIRE(PredictedSteps(quarter, 0, {{16, 0}, {16, 0}, {16, 0}}, 64) == Approx(3));
  REQUIRE(PredictedSteps(quarter, 2.0, {{16, 2.0}, {16, 0}, {16, 2.0}}, 64) == Approx(3));
  // A worker 4x slower than its peer meets four of its steps; the fast one a quarter of one.
  const StepSettings half = AsyncStepFor(32, 64, 2, 1, 0.9);
  REQUIRE(PredictedSteps(half, 4.0, {{32, 1.0}}, 64) == Approx(4));
  REQUIRE(PredictedSteps(half, 1.0, {{32, 4.0}}, 64) == Approx(0.25));
  // A pause does not throw the weights far: the pace ratio stays within 1/8..8.
  REQUIRE(PredictedSteps(half, 100.0, {{32, 1.0}}, 64) == Approx(8));
  REQUIRE(PredictedSteps(half, 1.0, {{32, 100.0}}, 64) == Approx(0.125));
  // A damped (stale) push moved less: the peers' undamped steps are more of it.
  REQUIRE(PredictedSteps(AsyncStepFor(32, 64, 2, 3, 0.9), 1.0, {{32, 1.0}}, 64) == Approx(2));
  // Full Adam steps at lr * b/B (the square-root rule off): sizes in proportion to batches.
  AsyncRuleOptions full_steps;
  full_steps.adam_sqrt_scaling = false;
  REQUIRE(PredictedSteps(AsyncStepFor(48, 64, 2, 1, 0.9, full_steps), 1.0, {{16, 1.0}}, 64, full_steps) ==
          Approx(1.0 / 3));
  // Bounded (a shard refuses a step beyond its wire bound).
  REQUIRE(PredictedSteps(AsyncStepFor(1, 1 << 30, 2, 1, 0.9), 100.0, {{1 << 30, 1.0}}, 1 << 30) == kMaxPredictedSteps);
  // A peer with no batch yet is skipped; a push that moved nothing predicts nothing.
  REQUIRE(PredictedSteps(half, 1.0, {{0, 1.0}}, 64) == 0);
  REQUIRE(PredictedSteps(StepSettings{/*lr_scale=*/0}, 1.0, {{32, 1.0}}, 64) == 0);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
