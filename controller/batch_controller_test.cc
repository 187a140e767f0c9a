#include "controller/batch_controller.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "catch2/catch.hpp"
#include "controller/simulation.h"

namespace omnilearn {
namespace controller {
namespace {

constexpr int kSeeds = 20;

SimulationOptions Cluster(std::vector<double> speeds, uint64_t seed, Policy policy = Policy::kOmniLearn) {
  SimulationOptions o;
  o.speeds = std::move(speeds);
  o.noise = 0.05;
  o.rounds = 102;
  o.iterations_per_adjustment = 5;
  o.seed = seed;
  o.controller.policy = policy;
  o.controller.global_batch = 256;
  return o;
}

std::vector<SimulationRound> Run(const SimulationOptions& o) {
  auto rounds = Simulate(o);
  REQUIRE(rounds.ok());
  return *rounds;
}

int Changes(const std::vector<SimulationRound>& rounds, int from, int to) {
  int n = 0;
  for (int r = from; r < to; ++r) n += rounds[r].changed ? 1 : 0;
  return n;
}

double MeanSpread(const std::vector<SimulationRound>& rounds, int from) {
  double s = 0;
  for (size_t r = from; r < rounds.size(); ++r) s += rounds[r].true_spread;
  return s / (rounds.size() - from);
}

TEST_CASE("converges within two adjustments and then holds still", "[controller]") {
  for (const auto& speeds : {std::vector<double>{1, 1, 2, 4}, std::vector<double>{1, 2, 3, 8}}) {
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      CAPTURE(speeds, seed);
      const auto rounds = Run(Cluster(speeds, seed));
      REQUIRE(rounds[0].true_spread > 3.9);  // equal batches to start with
      for (int r = 2; r <= 102; ++r) {
        CAPTURE(r);
        REQUIRE(rounds[r].true_spread <= 1.10);
      }
      // Adjustments after round 2 through round 102: at most two changes of any batch.
      REQUIRE(Changes(rounds, 2, 102) <= 2);
    }
  }
}

TEST_CASE("a worker slowing down 4x is rebalanced within two adjustments", "[controller]") {
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    CAPTURE(seed);
    SimulationOptions o = Cluster({1, 1, 2, 4}, seed);
    o.rounds = 60;
    o.schedule = {{30, 3, 1.0}};  // the fastest worker drops to speed 1 at round 30
    const auto rounds = Run(o);
    REQUIRE(rounds[30].true_spread > 3.5);
    for (int r = 32; r <= 60; ++r) {
      CAPTURE(r);
      REQUIRE(rounds[r].true_spread <= 1.10);
    }
    // And it speeds up again: rebalanced the other way too.
    o.rounds = 80;
    o.schedule = {{30, 3, 1.0}, {60, 3, 4.0}};
    const auto back = Run(o);
    REQUIRE(back[62].true_spread <= 1.10);
    REQUIRE(back[80].batches[3] > 100);
  }
}

TEST_CASE("throughput that is not linear in the batch still converges", "[controller]") {
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    CAPTURE(seed);
    SimulationOptions o = Cluster({1, 1, 2, 4}, seed);
    o.overhead_seconds = 0.020;  // 20 ms fixed per iteration, ~1/3 of the slowest time
    o.rounds = 60;
    const auto rounds = Run(o);
    for (int r = 4; r <= 60; ++r) {
      CAPTURE(r);
      REQUIRE(rounds[r].true_spread <= 1.10);
    }
    REQUIRE(Changes(rounds, 4, 60) <= 2);
  }
}

TEST_CASE("the sum equals the global batch and bounds hold after every adjustment", "[controller]") {
  for (Policy policy : {Policy::kOmniLearn, Policy::kPaper, Policy::kOff}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      CAPTURE(PolicyName(policy), seed);
      SimulationOptions o = Cluster({1, 1, 2, 8}, seed, policy);
      o.controller.min_batch = 20;
      o.controller.max_batch = 120;
      o.noise = 0.2;
      o.schedule = {{10, 0, 5.0}, {20, 3, 0.5}};
      o.rounds = 40;
      for (const SimulationRound& r : Run(o)) {
        REQUIRE(std::accumulate(r.batches.begin(), r.batches.end(), int64_t{0}) == 256);
        for (int64_t b : r.batches) {
          REQUIRE(b >= 20);
          REQUIRE(b <= 120);
        }
      }
    }
  }
}

TEST_CASE("an infeasible global batch is clamped to what the bounds allow", "[controller]") {
  ControllerOptions opts;
  opts.global_batch = 1000;
  opts.max_batch = 100;
  auto c = BatchController::Create(opts);
  REQUIRE(c.ok());
  REQUIRE(c->AddWorker(1).ok());
  REQUIRE(c->AddWorker(2).ok());
  REQUIRE(c->plan().total == 200);
  REQUIRE(c->plan().batch(1) == 100);
}

TEST_CASE("workers joining and leaving are redistributed at once", "[controller]") {
  ControllerOptions opts;
  opts.global_batch = 300;
  auto made = BatchController::Create(opts);
  REQUIRE(made.ok());
  BatchController& c = *made;
  for (WorkerId id : {1, 2, 3}) REQUIRE(c.AddWorker(id).ok());
  REQUIRE(c.plan().batch(1) == 100);
  // Worker 3 is twice as fast as 1 and 2.
  for (int i = 0; i < 5; ++i) {
    REQUIRE(c.Report(1, {100, 0.100}).ok());
    REQUIRE(c.Report(2, {100, 0.100}).ok());
    REQUIRE(c.Report(3, {100, 0.050}).ok());
  }
  c.Adjust();
  REQUIRE(c.plan().batch(1) == 75);
  REQUIRE(c.plan().batch(3) == 150);

  REQUIRE(c.RemoveWorker(2).ok());
  REQUIRE(c.plan().batch(1) == 100);
  REQUIRE(c.plan().batch(3) == 200);
  REQUIRE(c.plan().total == 300);

  // A newcomer without measurements is taken as typical of the others (median model).
  REQUIRE(c.AddWorker(7).ok());
  REQUIRE(c.plan().total == 300);
  REQUIRE(c.plan().batch(7) > 0);
  REQUIRE(c.plan().batch(7) > c.plan().batch(1));
  REQUIRE(c.plan().batch(7) < c.plan().batch(3));

  REQUIRE(c.RemoveWorker(2).code() == absl::StatusCode::kNotFound);
  REQUIRE(c.AddWorker(1).code() == absl::StatusCode::kAlreadyExists);
}

TEST_CASE("our policy leaves a smaller residual spread than the paper's rule", "[controller]") {
  for (const auto& speeds : {std::vector<double>{1, 1, 2, 4}, std::vector<double>{1, 2, 3, 8},
                             std::vector<double>{1, 1.3, 1.6, 2.5, 3, 6}}) {
    double ours = 0, paper = 0;
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      ours += MeanSpread(Run(Cluster(speeds, seed, Policy::kOmniLearn)), 5);
      paper += MeanSpread(Run(Cluster(speeds, seed, Policy::kPaper)), 5);
    }
    CAPTURE(speeds, ours / kSeeds, paper / kSeeds);
    REQUIRE(ours < paper);
    REQUIRE(ours / kSeeds < 1.06);
  }
}

// Options that learn from every report as it comes (no StepFilter): for tests that feed a
// rule one hand-made report at a time.
ControllerOptions Unfiltered() {
  ControllerOptions opts;
  opts.steps = StepFilterOptions::Off();
  return opts;
}

TEST_CASE("the paper rule moves b to b*tbar/t outside its dead-band only", "[controller]") {
  ControllerOptions opts = Unfiltered();
  opts.policy = Policy::kPaper;
  opts.global_batch = 200;
  auto c = BatchController::Create(opts);
  REQUIRE(c.ok());
  REQUIRE(c->AddWorker(1).ok());
  REQUIRE(c->AddWorker(2).ok());
  // 10% apart: inside the 0.2 dead-band, nothing moves.
  REQUIRE(c->Report(1, {100, 0.105}).ok());
  REQUIRE(c->Report(2, {100, 0.095}).ok());
  REQUIRE_FALSE(c->Adjust().changed);
  // 3x apart: tbar = 0.2; worker 1 -> 100*0.2/0.3, worker 2 -> 100*0.2/0.1, rescaled to 200.
  REQUIRE(c->Report(1, {100, 0.300}).ok());
  REQUIRE(c->Report(2, {100, 0.100}).ok());
  REQUIRE(c->Adjust().changed);
  REQUIRE(c->plan().batch(1) == 50);
  REQUIRE(c->plan().batch(2) == 150);
}

int64_t WidestPlan(const std::vector<SimulationRound>& rounds) {
  int64_t widest = 0;
  for (size_t r = 1; r < rounds.size(); ++r) {
    const auto [lo, hi] = std::minmax_element(rounds[r].batches.begin(), rounds[r].batches.end());
    widest = std::max(widest, *hi - *lo);
  }
  return widest;
}

// Eight identical devices (issue 50's 8-worker run planned 39,43,47,19,18,4,39,47 with
// 53-111 emulation overruns): the hosts of half of them take the cores, so every one of
// their steps overruns its emulated time 1.5x. Set aside, the overruns leave the batches
// equal (32 each, within the dead-band); learnt from, they plan them apart. And hosts that
// slow a random fifth of those workers' real steps 3x (no overrun to flag: outliers).
TEST_CASE("host load does not move identical devices' batches", "[controller]") {
  auto run = [](bool filter, double probability, double factor, bool overruns, uint64_t seed) {
    SimulationOptions o = Cluster({1, 1, 1, 1, 1, 1, 1, 1}, seed);
    o.rounds = 40;
    o.load_probability = {probability, 0, probability, 0, probability, 0, probability, 0};
    o.load_factor = factor;
    o.load_overruns = overruns;
    if (!filter) o.controller.steps = StepFilterOptions::Off();
    return Run(o);
  };
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(seed);
    CHECK(WidestPlan(run(true, 1.0, 1.5, true, seed)) <= 4);
    CHECK(WidestPlan(run(false, 1.0, 1.5, true, seed)) >= 12);
    CHECK(WidestPlan(run(true, 0.2, 3, false, seed)) <= 4);
    CHECK(WidestPlan(run(false, 0.2, 3, false, seed)) >= 8);
  }
}

// A first step 300x its time (a torch.compile step: 81 s against 0.3 s) on 4x-apart devices:
// dropped as warm-up, the first adjustment already balances them; learnt from, it holds the
// equal batches for another adjustment.
TEST_CASE("a compile step does not hold the plan", "[controller]") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(seed);
    SimulationOptions o = Cluster({1, 1, 2, 4}, seed);
    o.rounds = 20;
    o.first_step_factor = 300;
    const auto filtered = Run(o);
    CHECK(filtered[1].true_spread < 1.2);
    for (int r = 2; r <= 20; ++r) CHECK(filtered[r].true_spread <= 1.10);
    o.controller.steps = StepFilterOptions::Off();
    CHECK(Run(o)[1].true_spread > 3.5);
  }
}

TEST_CASE("the off policy keeps equal static batches", "[controller]") {
  const auto rounds = Run(Cluster({1, 1, 2, 4}, 3, Policy::kOff));
  for (const SimulationRound& r : rounds) {
    REQUIRE(r.batches == std::vector<int64_t>{64, 64, 64, 64});
    REQUIRE_FALSE(r.changed);
  }
}

TEST_CASE("out of memory lowers the worker's ceiling and training goes on", "[controller]") {
  SimulationOptions o = Cluster({1, 1, 2, 8}, 4);
  o.oom_batches = {0, 0, 0, 100};  // the fast worker would want ~146
  o.rounds = 30;
  const auto rounds = Run(o);
  // Each OOM bisects between the largest batch that fitted and the failing one.
  for (int r = 3; r <= 30; ++r) {
    CAPTURE(r);
    REQUIRE(rounds[r].batches[3] <= 100);
    REQUIRE(std::accumulate(rounds[r].batches.begin(), rounds[r].batches.end(), int64_t{0}) == 256);
  }
  // The others take the rest in proportion to their speeds (1:1:2).
  const auto& last = rounds.back().batches;
  REQUIRE(last[2] > last[0] * 3 / 2);

  auto c = BatchController::Create(Unfiltered());
  REQUIRE(c.ok());
  REQUIRE(c->AddWorker(1).ok());
  REQUIRE(c->ReportOutOfMemory(1, 200).ok());
  REQUIRE(c->plan().workers.at(1).max_batch == 100);  // nothing known to fit: halve
  REQUIRE(c->Report(1, {80, 0.1}).ok());
  c->Adjust();
  REQUIRE(c->ReportOutOfMemory(1, 100).ok());
  REQUIRE(c->plan().workers.at(1).max_batch == 90);  // 80 fitted: halfway, at most 0.9 * 100
  REQUIRE(c->ReportOutOfMemory(1, 0).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c->ReportOutOfMemory(9, 10).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("growing a batch that lowered throughput caps the worker (memory guard)", "[controller]") {
  ControllerOptions opts;
  opts.global_batch = 192;
  auto made = BatchController::Create(opts);
  REQUIRE(made.ok());
  BatchController& c = *made;
  REQUIRE(c.AddWorker(1).ok());
  REQUIRE(c.AddWorker(2).ok());
  // Worker 2 is 2x faster at 96: the controller grows it to 128.
  for (int i = 0; i < 3; ++i) {
    REQUIRE(c.Report(1, {96, 0.096}).ok());
    REQUIRE(c.Report(2, {96, 0.048}).ok());
  }
  c.Adjust();
  REQUIRE(c.plan().batch(2) == 128);
  // At 128 it thrashes: time quadruples, throughput falls by two thirds.
  for (int i = 0; i < 3; ++i) {
    REQUIRE(c.Report(1, {64, 0.064}).ok());
    REQUIRE(c.Report(2, {128, 0.192 + 0.001 * i}).ok());
  }
  c.Adjust();
  REQUIRE(c.plan().workers.at(2).max_batch == 96);
  REQUIRE(c.plan().batch(2) <= 96);
  REQUIRE(c.plan().total == 192);
}

// Two workers of equal speed (1000 samples/s), B = 100, worker 1 behind a link that costs it
// 20 ms per iteration; reports without noise.
std::map<WorkerId, int64_t> PlanWithLink(Balance balance) {
  ControllerOptions o;
  o.global_batch = 100;
  o.balance = balance;
  auto c = BatchController::Create(o);
  REQUIRE(c.ok());
  REQUIRE(c->AddWorker(0).ok());
  REQUIRE(c->AddWorker(1).ok());
  for (int adjustment = 0; adjustment < 4; ++adjustment) {
    for (int i = 0; i < 5; ++i) {
      for (WorkerId k : {0, 1}) {
        const int64_t b = c->plan().batch(k);
        REQUIRE(c->Report(k, {b, b / 1000.0, k == 1 ? 0.020 : 0.001}).ok());
      }
    }
    c->Adjust();
  }
  return {{0, c->plan().batch(0)}, {1, c->plan().batch(1)}};
}

TEST_CASE("whole iterations are balanced: a worker behind a slow link gets a smaller batch", "[controller][link]") {
  // Equal iterations: b0 / 1000 + 0.001 = b1 / 1000 + 0.020 and b0 + b1 = 100: 59.5 and 40.5.
  const auto iteration = PlanWithLink(Balance::kIteration);
  CAPTURE(iteration);
  REQUIRE(iteration.at(0) + iteration.at(1) == 100);
  REQUIRE(std::abs(iteration.at(0) - 59.5) <= 1.5);
  // Compute only (the paper's view): equal devices, equal batches.
  const auto compute = PlanWithLink(Balance::kCompute);
  REQUIRE(compute.at(0) == 50);
  REQUIRE(compute.at(1) == 50);
}

TEST_CASE("simulated: HL8 with the fastest worker behind a slow link", "[controller][link]") {
  // The emulated cluster's HL8 (6,6,4,32 cores at 6 ms per sample per core, 2 ms per step),
  // B = 128, the fastest worker with 8 ms of link per iteration, the others 1 ms.
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    CAPTURE(seed);
    SimulationOptions o = Cluster({6, 6, 4, 32}, seed);
    o.samples_per_second = 1000.0 / 6;
    o.overhead_seconds = 0.002;
    o.link_seconds = {0.001, 0.001, 0.001, 0.008};
    o.rounds = 20;
    o.controller.global_batch = 128;
    const auto iteration = Run(o);
    o.controller.balance = Balance::kCompute;
    const auto compute = Run(o);
    // Whole iterations equal within noise; compute-only balance leaves the link's 7 ms.
    REQUIRE(iteration.back().true_iteration_spread < 1.08);
    REQUIRE(compute.back().true_iteration_spread > 1.3);
    REQUIRE(iteration.back().batches[3] < compute.back().batches[3]);
    const double slowest_iteration = *std::max_element(iteration.back().true_iteration_seconds.begin(),
                                                       iteration.back().true_iteration_seconds.end());
    const double slowest_compute =
        *std::max_element(compute.back().true_iteration_seconds.begin(), compute.back().true_iteration_seconds.end());
    // The round is shorter: 23.7 ms against 25.9 ms without noise.
    REQUIRE(slowest_iteration < 0.95 * slowest_compute);
  }
}

TEST_CASE("links that differ by queueing, not by rate, leave equal devices equal batches", "[controller][link]") {
  // HL1 behind one shared server link: whoever pushes last queues behind the others, so the
  // link times differ by up to 20% (10-12 ms) though the links are equal. Charging each its
  // own time moved batches between identical devices at every adjustment.
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    CAPTURE(seed);
    SimulationOptions o = Cluster({12, 12, 12, 12}, seed);
    o.samples_per_second = 1000.0 / 6;
    o.overhead_seconds = 0.002;
    o.link_seconds = {0.010, 0.012, 0.011, 0.010};
    o.rounds = 20;
    o.controller.global_batch = 128;
    for (const auto& round : Run(o)) {
      CAPTURE(round.batches);
      REQUIRE(*std::max_element(round.batches.begin(), round.batches.end()) -
                  *std::min_element(round.batches.begin(), round.batches.end()) <=
              1);
    }
    // A link 50% slower than the others' still costs its worker samples.
    o.link_seconds = {0.010, 0.015, 0.010, 0.010};
    const auto slow = Run(o);
    REQUIRE(slow.back().batches[1] < 32);
  }
}

// Four equal devices (6 ms per sample), B = 128, whole iterations balanced, equal links of
// 50 ms; the first adjustment comes after two rounds, as the core makes it. The first link
// time of each worker is its first round's, on new connections: worker 0, which started that
// round last, saw 97 ms (bench/peers.py, mlp4 at HL1: the plan went to 11,25,53,38 and took
// some 15 rounds to come back). Returns the batches after each adjustment.
std::vector<std::vector<int64_t>> EqualDevicesColdFirstLink(StepFilterOptions steps) {
  ControllerOptions o;
  o.global_batch = 128;
  o.balance = Balance::kIteration;
  o.steps = steps;
  auto c = BatchController::Create(o);
  REQUIRE(c.ok());
  for (WorkerId k = 0; k < 4; ++k) REQUIRE(c->AddWorker(k).ok());
  std::vector<std::vector<int64_t>> plans;
  for (int round = 1; round <= 7; ++round) {
    for (WorkerId k = 0; k < 4; ++k) {
      const int64_t b = c->plan().batch(k);
      const double link = round == 1 ? 0 : round == 2 && k == 0 ? 0.097 : 0.050;  // a round reports the one before
      REQUIRE(c->Report(k, {b, 0.006 * b, link}).ok());
    }
    if (round == 2 || round == 7) {
      c->Adjust();
      plans.push_back({c->plan().batch(0), c->plan().batch(1), c->plan().batch(2), c->plan().batch(3)});
    }
  }
  return plans;
}

TEST_CASE("a worker's first link time, its first round's, does not move equal devices", "[controller][link]") {
  for (const std::vector<int64_t>& plan : EqualDevicesColdFirstLink(StepFilterOptions{})) {
    CAPTURE(plan);
    REQUIRE(plan == std::vector<int64_t>{32, 32, 32, 32});
  }
  // Learnt from, that one round's link takes samples from worker 0.
  StepFilterOptions learn_first;
  learn_first.skip_first_link = false;
  const auto moved = EqualDevicesColdFirstLink(learn_first);
  CAPTURE(moved);
  REQUIRE(moved[0][0] < 32);
}

TEST_CASE("a plan made from a burst of noise is reverted after one window", "[controller][trial]") {
  // Two workers 4.33x apart (the 26/6 job), 10% noise; in round 10 worker 0 runs at
  // half its speed (a loaded host), then at its own again. The change detector takes the
  // burst for a change of speed and the controller moves samples to worker 1; that plan's
  // first window delivers less than the old one's, and the models from before the burst
  // predict it: the old plan comes back at once.
  double kept_seconds = 0, reverted_seconds = 0;
  int creeping = 0;
  for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
    CAPTURE(seed);
    SimulationOptions o = Cluster({4.33, 1}, seed);
    o.noise = 0.10;
    o.overhead_seconds = 0.002;
    o.rounds = 20;
    o.schedule = {{10, 0, 2.0}, {11, 0, 4.33}};
    const auto with = Run(o);
    o.controller.revert_worse_plans = false;
    const auto without = Run(o);
    const int64_t before = with[10].batches[0];
    for (int r = 12; r <= 20; ++r) {
      CAPTURE(r);
      REQUIRE(std::abs(with[r].batches[0] - before) <= 4);  // 2%: what the noise moves
      reverted_seconds += *std::max_element(with[r].true_seconds.begin(), with[r].true_seconds.end());
      kept_seconds += *std::max_element(without[r].true_seconds.begin(), without[r].true_seconds.end());
    }
    if (std::abs(without[12].batches[0] - before) > 8) ++creeping;
  }
  // Without the revert some runs creep back over several windows: rounds 12-20 take longer.
  CAPTURE(creeping, kept_seconds, reverted_seconds);
  REQUIRE(creeping > 0);
  REQUIRE(reverted_seconds < kept_seconds);
}

TEST_CASE("bad options and reports are rejected", "[controller]") {
  ControllerOptions bad;
  bad.global_batch = 0;
  REQUIRE(BatchController::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad.global_batch = 10;
  bad.min_batch = 5;
  bad.max_batch = 4;
  REQUIRE(BatchController::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad = ControllerOptions();
  bad.deadband = 1.5;
  REQUIRE(BatchController::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);

  auto c = BatchController::Create(ControllerOptions());
  REQUIRE(c.ok());
  REQUIRE(c->AddWorker(1).ok());
  REQUIRE(c->AddWorker(2, {50, 10}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c->Report(1, {0, 0.1}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c->Report(1, {10, -1}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c->Report(1, {10, std::numeric_limits<double>::quiet_NaN()}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c->Report(1, {10, std::numeric_limits<double>::infinity()}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c->Report(5, {10, 0.1}).code() == absl::StatusCode::kNotFound);
  REQUIRE(c->Report(1, {10, 0.1, -0.001}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c->Report(1, {10, 0.1, std::numeric_limits<double>::quiet_NaN()}).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(ParseBalance("compute").value() == Balance::kCompute);
  REQUIRE_FALSE(ParseBalance("links").ok());

  REQUIRE(ParsePolicy("Paper").value() == Policy::kPaper);
  REQUIRE_FALSE(ParsePolicy("pid").ok());
  REQUIRE_FALSE(ParseSpeeds("1,x").ok());
  REQUIRE_FALSE(ParseSpeeds("1,-2").ok());
  REQUIRE(ParseSchedule("3:1:0.5").value().size() == 1);
  REQUIRE_FALSE(ParseSchedule("3:1").ok());
  SimulationOptions o = Cluster({1, 2}, 1);
  o.schedule = {{1, 5, 1.0}};
  REQUIRE_FALSE(Simulate(o).ok());
}

}  // namespace
}  // namespace controller
}  // namespace omnilearn

namespace omnilearn {
namespace controller {
namespace {

// Trains a controller on two workers, one 3x slower, until it has balanced them.
BatchController Balanced(Policy policy) {
  ControllerOptions opts;
  opts.policy = policy;
  opts.global_batch = 200;
  auto c = BatchController::Create(opts);
  REQUIRE(c.ok());
  REQUIRE(c->AddWorker(1).ok());
  REQUIRE(c->AddWorker(2).ok());
  for (int round = 0; round < 6; ++round) {
    for (int i = 0; i < 5; ++i) {
      REQUIRE(c->Report(1, {c->plan().batch(1), 0.001 * c->plan().batch(1)}).ok());
      REQUIRE(c->Report(2, {c->plan().batch(2), 0.003 * c->plan().batch(2)}).ok());
    }
    c->Adjust();
  }
  REQUIRE(c->plan().batch(1) == 150);
  REQUIRE(c->plan().batch(2) == 50);
  return std::move(*c);
}

TEST_CASE("a remembered worker is re-balanced at once by a new controller", "[controller][memory]") {
  for (Policy policy : {Policy::kOmniLearn, Policy::kPaper}) {
    CAPTURE(PolicyName(policy));
    BatchController before = Balanced(policy);
    const WorkerMemory m1 = *before.Remember(1), m2 = *before.Remember(2);
    REQUIRE(m1.batch == 150);
    REQUIRE_FALSE(m1.history.empty());
    // A fresh controller (a restarted server) with new ids for the same workers.
    ControllerOptions opts = before.options();
    auto after = BatchController::Create(opts);
    REQUIRE(after.ok());
    REQUIRE(after->AddWorker(11, {}, m1).ok());
    REQUIRE(after->AddWorker(12, {}, m2).ok());
    REQUIRE(after->plan().batch(11) == 150);  // no equal-batch phase
    REQUIRE(after->plan().batch(12) == 50);
    REQUIRE(after->plan().total == 200);
  }
}

TEST_CASE("a fresh controller without memory starts from equal batches", "[controller][memory]") {
  auto c = BatchController::Create({});
  REQUIRE(c->AddWorker(1).ok());
  REQUIRE(c->AddWorker(2).ok());
  REQUIRE(c->plan().batch(1) == c->plan().batch(2));
}

TEST_CASE("the memory keeps the memory guard's ceiling", "[controller][memory]") {
  auto c = BatchController::Create({});
  REQUIRE(c->AddWorker(1).ok());
  REQUIRE(c->ReportOutOfMemory(1, 100).ok());
  const WorkerMemory m = *c->Remember(1);
  REQUIRE(m.guard_max > 0);
  REQUIRE(m.guard_max < 100);
  auto d = BatchController::Create({});
  REQUIRE(d->AddWorker(5, {}, m).ok());
  REQUIRE(d->plan().workers.at(5).max_batch == m.guard_max);
}

TEST_CASE("impossible memories are refused and change nothing", "[controller][memory]") {
  auto c = BatchController::Create({});
  WorkerMemory m;
  m.history.push_back({10, -1.0, 5, 0});
  REQUIRE(c->AddWorker(1, {}, m).code() == absl::StatusCode::kInvalidArgument);
  m.history = {{10, std::nan(""), 5, 0}};
  REQUIRE(c->AddWorker(1, {}, m).code() == absl::StatusCode::kInvalidArgument);
  m.history = std::vector<Observation>(20, {10, 0.1, 5, 0});
  REQUIRE(c->AddWorker(1, {}, m).code() == absl::StatusCode::kInvalidArgument);
  m = {};
  m.batch = -3;
  REQUIRE(c->AddWorker(1, {}, m).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(c->num_workers() == 0);
  REQUIRE(c->Remember(1).status().code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace controller
}  // namespace omnilearn
