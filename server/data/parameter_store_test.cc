// The store's arithmetic in closed form: schedules, clipping, buffers, state names.
// server/optimizer_torch_test.cc checks the optimizers against LibTorch's own.
#include "server/data/parameter_store.h"

#include <cmath>
#include <deque>
#include <random>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

// A step's settings in Apply's order of old: the rate's scale, the buffers' blend, the
// momentum (< 0: the optimizer's own), the update's scale, the sample share, the norm.
StepSettings Settings(double lr_scale, double buffer_blend = 1, double momentum = -1, double update_scale = 1,
                      double sample_share = 1, std::optional<double> norm_squared = std::nullopt) {
  StepSettings s;
  s.lr_scale = lr_scale;
  s.buffer_blend = buffer_blend;
  if (momentum >= 0) s.momentum = momentum;
  s.update_scale = update_scale;
  s.sample_share = sample_share;
  s.norm_squared = norm_squared;
  return s;
}

ModelLayout TwoTensors(bool second_is_buffer) {
  return *ModelLayout::Create({TensorSpec{"w", {2}}, TensorSpec{"bn.running_mean", {2}, second_is_buffer}});
}

double RateAt(OptimizerOptions o, uint64_t version) {
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(false), {0, 0, 0, 0}, version).ok());
  return s.LearningRate();
}

TEST_CASE("Warm-up rises linearly, then step, cosine or constant") {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.warmup_steps = 4;
  REQUIRE(RateAt(o, 0) == Approx(0.25));
  REQUIRE(RateAt(o, 3) == Approx(1.0));
  REQUIRE(RateAt(o, 100) == Approx(1.0));
  o.schedule = LrSchedule::kStep;
  o.lr_decay_steps = 10;
  o.lr_decay = 0.5;
  REQUIRE(RateAt(o, 13) == Approx(1.0));    // s = 9
  REQUIRE(RateAt(o, 14) == Approx(0.5));    // s = 10
  REQUIRE(RateAt(o, 34) == Approx(0.125));  // s = 30
  o.schedule = LrSchedule::kCosine;
  o.cosine_steps = 100;
  o.lr_min = 0.1;
  REQUIRE(RateAt(o, 4) == Approx(1.0));
  REQUIRE(RateAt(o, 54) == Approx(0.55));  // half way: the mean of lr and lr_min
  REQUIRE(RateAt(o, 104) == Approx(0.1));
  REQUIRE(RateAt(o, 1000) == Approx(0.1));  // stays at lr_min
}

TEST_CASE("A step's own rate replaces the store's schedule and lr_scale (a shard replaying its coordinator's)") {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.warmup_steps = 4;  // the schedule says 0.25 at version 0
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(false), {1, 1, 0, 0}, 0).ok());
  StepSettings step;
  step.lr_scale = 0.5;  // ignored with a rate of its own
  step.learning_rate = 0.1;
  s.Apply({2, 4, 0, 0}, step);
  REQUIRE((*s.weights())[0] == Approx(1 - 0.1 * 2));
  REQUIRE((*s.weights())[1] == Approx(1 - 0.1 * 4));
  step.learning_rate.reset();  // the schedule's (0.5 at version 1) times lr_scale
  s.Apply({2, 4, 0, 0}, step);
  REQUIRE((*s.weights())[0] == Approx(0.8 - 0.5 * 0.5 * 2));
}

TEST_CASE("The step schedule in epochs decays at epoch boundaries, whatever the versions") {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.schedule = LrSchedule::kStep;
  o.lr_decay_epochs = 2;
  o.lr_decay = 0.5;
  REQUIRE(ValidateOptimizerOptions(o).ok());
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(false), {0, 0, 0, 0}, 5000).ok());
  REQUIRE(s.LearningRate() == Approx(1.0));  // epoch 0
  s.SetEpoch(1.99);
  REQUIRE(s.LearningRate() == Approx(1.0));
  s.SetEpoch(2.0);
  REQUIRE(s.LearningRate() == Approx(0.5));
  s.SetEpoch(4.5);
  REQUIRE(s.LearningRate() == Approx(0.25));
  o.lr_decay_steps = 10;  // versions and epochs at once: which?
  REQUIRE(absl::StrContains(ValidateOptimizerOptions(o).message(), "not both"));
}

TEST_CASE("Options out of range are refused, naming the option") {
  OptimizerOptions o;
  REQUIRE(ValidateOptimizerOptions(o).ok());
  o.schedule = LrSchedule::kCosine;
  REQUIRE(ValidateOptimizerOptions(o).code() == absl::StatusCode::kInvalidArgument);
  o = OptimizerOptions();
  o.beta2 = 1.0;
  REQUIRE(ValidateOptimizerOptions(o).code() == absl::StatusCode::kInvalidArgument);
  o = OptimizerOptions();
  o.clip_grad_norm = -1;
  REQUIRE(absl::StrContains(ValidateOptimizerOptions(o).message(), "clipping"));
  REQUIRE(ParseOptimizer("AdamW").value() == OptimizerKind::kAdamW);
  REQUIRE(ParseOptimizer("RMSprop").value() == OptimizerKind::kRMSprop);
  REQUIRE(absl::StrContains(ParseOptimizer("lbfgs").status().message(), "sgd, adam, adamw, adadelta"));
  REQUIRE(absl::StrContains(ParseLrSchedule("linear").status().message(), "constant, step or cosine"));
}

TEST_CASE("The optimizer is described in torch.optim's words, every hyperparameter of its kind") {
  OptimizerOptions o;
  REQUIRE(DescribeOptimizer(o) ==
          "SGD(lr=0.05, momentum=0, dampening=0, nesterov=False, maximize=False, weight_decay=0), clip_grad_norm=0, "
          "warmup_steps=0, schedule=constant");
  o.kind = OptimizerKind::kAdamW;
  o.learning_rate = 0.003;
  o.weight_decay = 0.01;
  o.clip_grad_norm = 1;
  o.schedule = LrSchedule::kCosine;
  o.cosine_steps = 500;
  REQUIRE(DescribeOptimizer(o) ==
          "AdamW(lr=0.003, betas=(0.9, 0.999), eps=1e-08, amsgrad=False, maximize=False, weight_decay=0.01), "
          "clip_grad_norm=1, warmup_steps=0, schedule=cosine(steps=500, lr_min=0)");
  o.schedule = LrSchedule::kStep;
  o.lr_decay_epochs = 2;
  REQUIRE(absl::StrContains(DescribeOptimizer(o), "schedule=step(gamma=0.1, every 2 epochs)"));
}

TEST_CASE("Param groups cover every parameter once; a scheduler's rates replace the schedule") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.momentum = 0;
  o.weight_decay = 0;
  o.learning_rate = 0.5;
  o.warmup_steps = 4;
  const ModelLayout two_params = TwoTensors(false);
  auto refused = [&](std::vector<ParamGroup> groups, const char* says) {
    o.groups = std::move(groups);
    ParameterStore store(o);
    const absl::Status s = store.Initialize(two_params, {1, 1, 1, 1});
    INFO(s.message());
    REQUIRE(absl::StrContains(s.message(), says));
  };
  refused({ParamGroup{{0}, 0.5, 0}}, "tensor 'bn.running_mean' is in no param group");
  refused({ParamGroup{{0, 1}, 0.5, 0}, ParamGroup{{1}, 0.1, 0}}, "is in param groups 0 and 1");
  refused({ParamGroup{{0, 1, 2}, 0.5, 0}}, "names tensor 2, not a parameter");
  o.groups = {ParamGroup{{0}, 0.5, 0}, ParamGroup{{1}, 0.1, 0}};
  REQUIRE(absl::StrContains(ValidateOptimizerOptions([&] {
                              OptimizerOptions bad = o;
                              bad.groups[1].lr = -1;
                              return bad;
                            }())
                                .message(),
                            "param group 1's learning rate must be > 0"));
  ParameterStore store(o);
  REQUIRE(store.Initialize(two_params, {1, 1, 1, 1}).ok());
  // Warm-up: each group at its rate times the schedule's factor (1/4 at the first step).
  REQUIRE(store.GroupRate(0) == 0.125);
  REQUIRE(store.GroupRate(1) == Approx(0.025));
  store.Apply({1, 1, 1, 1});
  REQUIRE((*store.weights())[0] == Approx(1 - 0.125));
  REQUIRE((*store.weights())[2] == Approx(1 - 0.025));
  REQUIRE(absl::StrContains(store.SetGroupRates({0.2}).message(), "1 learning rates for the job's 2 param groups"));
  REQUIRE(absl::StrContains(store.SetGroupRates({0.2, NAN}).message(), "a learning rate of nan"));
  REQUIRE(store.SetGroupRates({0.2, 0.05}).ok());
  REQUIRE(store.LearningRate() == 0.2);  // no longer the warm-up's
  store.Apply({1, 1, 1, 1});
  REQUIRE((*store.weights())[0] == Approx(1 - 0.125 - 0.2));
  REQUIRE((*store.weights())[2] == Approx(1 - 0.025 - 0.05));
}

TEST_CASE("Clipping scales the parameters' gradient to the norm; buffers are not gradients") {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.momentum = 0;
  o.weight_decay = 0;
  o.clip_grad_norm = 1.0;
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(true), {0, 0, 0, 0}).ok());
  s.Apply({3, 4, 100, 100});  // norm 5 -> 1; the buffer's 100s are values
  const std::vector<float>& w = *s.weights();
  REQUIRE(w[0] == Approx(-0.6).margin(1e-5));
  REQUIRE(w[1] == Approx(-0.8).margin(1e-5));
  REQUIRE(w[2] == 100);
  REQUIRE(w[3] == 100);
}

TEST_CASE("SGD without momentum steps without a velocity; a damped step of a momentum job keeps it") {
  OptimizerOptions o;
  o.learning_rate = 0.5;
  o.momentum = 0;
  o.weight_decay = 0.1;
  ParameterStore plain(o);
  REQUIRE(plain.Initialize(TwoTensors(false), {1, 2, 3, 4}).ok());
  plain.Apply({1, 1, 1, 1});
  for (int i = 0; i < 4; ++i) {
    const float w0 = static_cast<float>(i + 1);
    REQUIRE((*plain.weights())[i] == Approx(w0 - 0.5f * (1 + 0.1f * w0)));
  }
  // momentum 0.9, a first step damped to momentum 0: its velocity is the next step's.
  o.momentum = 0.9;
  o.weight_decay = 0;
  ParameterStore damped(o);
  REQUIRE(damped.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  damped.Apply({1, 1, 1, 1}, Settings(1.0, 1.0, /*momentum=*/0));
  REQUIRE((*damped.weights())[0] == Approx(-0.5));
  damped.Apply({0, 0, 0, 0});  // v = 0.9 * 1 + 0
  REQUIRE((*damped.weights())[0] == Approx(-0.5 - 0.45));
}

TEST_CASE("Async damping lowers each param group's own momentum, not group 0's for all") {
  OptimizerOptions o;
  o.learning_rate = 1;
  o.momentum = 0.9;
  o.weight_decay = 0;
  o.groups = {ParamGroup{{0}, 1, 0}, ParamGroup{{1}, 1, 0, {{"momentum", 0.5}}}};
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  StepSettings cut;
  cut.momentum = 0.4;  // group 0's (0.9 - 0.5), as a shard of an earlier release reads it
  cut.momentum_cut = 0.5;
  s.Apply({1, 1, 1, 1});  // v = 1 in both groups
  s.Apply({0, 0, 0, 0}, cut);
  REQUIRE((*s.weights())[0] == Approx(-1 - 0.4));  // group 0: 0.9 - 0.5
  REQUIRE((*s.weights())[2] == Approx(-1 - 0.0));  // group 1: 0.5 - 0.5, not group 0's 0.4
  s.Apply({0, 0, 0, 0});                           // none: each group's own
  REQUIRE((*s.weights())[0] == Approx(-1.4 - 0.9 * 0.4));
  REQUIRE((*s.weights())[2] == Approx(-1.0));  // its velocity is 0 now
}

TEST_CASE("Muon's groups hold matrices; another shape is refused unless its group is an AdamW one") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kMuon;
  o.learning_rate = 0.02;
  o.momentum = 0.95;
  o.eps = 1e-7;
  const ModelLayout layout = *ModelLayout::Create({TensorSpec{"fc.weight", {2, 3}}, TensorSpec{"fc.bias", {2}}});
  ParameterStore muon(o);
  REQUIRE(absl::StrContains(muon.Initialize(layout, std::vector<float>(8, 1)).message(),
                            "Muon steps matrices, and tensor 'fc.bias' has 1 dimensions"));
  o.groups = {ParamGroup{{0}, 0.02, 0.1}, ParamGroup{{1}, 0.01, 0, {{"adamw", 1}}}};
  ParameterStore recipe(o);
  REQUIRE(recipe.Initialize(layout, std::vector<float>(8, 1)).ok());
  REQUIRE(recipe.OptimizerState().size() == 2);  // momentum_buffer, and exp_avg_sq for the AdamW group
  recipe.Apply(std::vector<float>(8, 1));
  for (float w : *recipe.weights()) REQUIRE(w < 1);  // both groups stepped down the gradient
}

TEST_CASE("Buffers take the update's values (sync) or blend toward them (async)") {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.momentum = 0;
  o.weight_decay = 0;
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(true), {1, 1, 2, 4}).ok());
  s.Apply({0, 0, 6, 8}, Settings(1.0, /*buffer_blend=*/0.25));
  const std::vector<float>& w = *s.weights();
  REQUIRE(w[0] == 1);            // zero gradient
  REQUIRE(w[2] == Approx(3.0));  // 2 + 0.25 * (6 - 2)
  REQUIRE(w[3] == Approx(5.0));
  REQUIRE((*s.OptimizerState()[0].second)[2] == 0);  // no optimizer state moves for a buffer
}

TEST_CASE("a prediction steps the parameters ahead by the last step, not the buffers; 0 serves the weights",
          "[store]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.learning_rate = 0.1;
  o.weight_decay = 0;
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(true), {1, 2, 5, 6}).ok());
  s.Predict(1);  // no step yet: nothing to go by
  REQUIRE(s.served() == s.weights());
  s.Apply({1, -1, 7, 8}, Settings(1.0, /*buffer_blend=*/0.5));
  const std::vector<float> before = {1, 2}, after = {(*s.weights())[0], (*s.weights())[1]};
  REQUIRE(after[0] < before[0]);
  s.Predict(2);
  const std::shared_ptr<const std::vector<float>> served = s.served();
  REQUIRE(served != s.weights());
  REQUIRE((*served)[0] == Approx(after[0] + 2 * (after[0] - before[0])));
  REQUIRE((*served)[1] == Approx(after[1] + 2 * (after[1] - before[1])));
  REQUIRE((*served)[2] == (*s.weights())[2]);  // a buffer is served as it is
  REQUIRE((*served)[3] == (*s.weights())[3]);
  const std::vector<float> held = *served;
  s.Apply({1, -1, 7, 8}, Settings(1.0, 0.5));
  s.Predict(1);
  REQUIRE(*served == held);  // a prediction a reader holds is never overwritten
  REQUIRE(s.served() != served);
  s.Apply({1, -1, 7, 8}, Settings(1.0, 0.5));
  s.Predict(0);  // sync, or one worker: the weights themselves
  REQUIRE(s.served() == s.weights());
}

TEST_CASE("Each optimizer names its state, and a checkpoint of another is refused") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  ParameterStore adam(o);
  REQUIRE(adam.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  auto state = adam.OptimizerState();
  REQUIRE(state.size() == 2);
  REQUIRE(state[0].first == "exp_avg");
  REQUIRE(state[1].first == "exp_avg_sq");
  ParameterStore sgd{OptimizerOptions()};
  absl::Status s = sgd.Restore(TwoTensors(false), {0, 0, 0, 0}, state, 3);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(s.message(), "momentum"));
  ParameterStore adam2(o);
  REQUIRE(adam2.Restore(TwoTensors(false), {0, 0, 0, 0}, state, 3).ok());
  REQUIRE(adam2.version() == 3);
  REQUIRE(adam2.adam_time() == 3.0);  // a checkpoint without it: the version
  ParameterStore adam3(o);
  REQUIRE(adam3.Restore(TwoTensors(false), {0, 0, 0, 0}, state, 3, 1.75).ok());
  REQUIRE(adam3.adam_time() == 1.75);
}

// One weight, Adam or AdamW, lr 0.1; `pushes` steps of share f with lr_scale f (what an
// async push of b = f * B takes), gradient `g` every time. The weight after them.
double AdamPushes(OptimizerKind kind, double weight_decay, double f, int pushes, float g, double* adam_time = nullptr) {
  OptimizerOptions o;
  o.kind = kind;
  o.learning_rate = 0.1;
  o.weight_decay = weight_decay;
  ParameterStore s(o);
  REQUIRE(s.Initialize(*ModelLayout::Create({TensorSpec{"w", {1}}}), {1.0f}).ok());
  for (int i = 0; i < pushes; ++i) s.Apply({g}, Settings(f, 1.0, -1, 1.0, f));
  if (adam_time != nullptr) *adam_time = s.adam_time();
  return (*s.weights())[0];
}

TEST_CASE("Adam's square-root rule: a push of share f steps sqrt(f) of a full step, moments by shares", "[store]") {
  // From zero moments the bias-corrected moments are g and g^2 at any share, so the step is
  // lr * f / sqrt(f) = lr * sqrt(f): 0.1 * 0.5 = 0.05 at f = 1/4.
  REQUIRE(AdamPushes(OptimizerKind::kAdam, 0, 0.25, 1, 2.0f) == Approx(0.95).epsilon(1e-6));
  double time = 0;
  AdamPushes(OptimizerKind::kAdam, 0, 0.25, 4, 2.0f, &time);
  REQUIRE(time == 1.0);  // four quarters are one global batch for the bias correction
  // A share of 1 is the plain Adam step (the sync path, checked against LibTorch).
  REQUIRE(AdamPushes(OptimizerKind::kAdam, 0, 1.0, 1, 2.0f) == Approx(0.9).epsilon(1e-6));
  // Noise dominates Adam's second moment in minibatch training: a quarter batch's gradient
  // has 4x the variance, so its normalized step is 2x smaller, which sqrt(f) makes up for.
  // Gradients of mean zero (pure noise), standard deviation 1 for a full batch and 2 for a
  // quarter: four quarter pushes spread the weight as far as one full step does (root
  // mean square over 300 seeded walks of 25 global batches); at lr_scale f alone, half.
  auto spread = [](double f, double sqrt_share) {
    std::mt19937 rng(7);
    std::normal_distribution<float> noise(0.0f, static_cast<float>(1 / std::sqrt(f)));
    OptimizerOptions o;
    o.kind = OptimizerKind::kAdam;
    o.learning_rate = 0.1;
    double sum = 0;
    for (int walk = 0; walk < 300; ++walk) {
      ParameterStore s(o);
      REQUIRE(s.Initialize(*ModelLayout::Create({TensorSpec{"w", {1}}}), {0.0f}).ok());
      for (int i = 0; i < static_cast<int>(25 / f); ++i) s.Apply({noise(rng)}, Settings(f, 1.0, -1, 1.0, sqrt_share));
      sum += (*s.weights())[0] * (*s.weights())[0];
    }
    return std::sqrt(sum / 300);
  };
  const double full = spread(1.0, 1.0);
  REQUIRE(spread(0.25, 0.25) == Approx(full).epsilon(0.15));
  REQUIRE(spread(0.25, 1.0) < 0.65 * full);  // each push a full Adam step at lr * f: what async did before
  // A step's momentum is Adam's beta1 (the async rule lowers it): 1, then -1, at beta1 0.4
  // gives m = 0.4 * 0.6 - 0.6 = -0.36 over a bias of 0.84, v's bias-corrected value 1.
  OptimizerOptions adam;
  adam.kind = OptimizerKind::kAdam;
  adam.learning_rate = 0.1;
  ParameterStore lowered(adam);
  REQUIRE(lowered.Initialize(*ModelLayout::Create({TensorSpec{"w", {1}}}), {1.0f}).ok());
  lowered.Apply({1.0f}, Settings(1.0, 1.0, 0.4));
  lowered.Apply({-1.0f}, Settings(1.0, 1.0, 0.4));
  REQUIRE((*lowered.weights())[0] == Approx(0.9 + 0.1 * 0.36 / 0.84).epsilon(1e-4));  // float moments
  // The decoupled decay stays linear in the samples: four quarter pushes decay as one step.
  const double decayed = AdamPushes(OptimizerKind::kAdamW, 0.5, 0.25, 4, 0.0f);
  REQUIRE(decayed == Approx(std::pow(1 - 0.1 * 0.25 * 0.5, 4)).epsilon(1e-6));
  // SGD takes lr_scale as it is, whatever the share.
  OptimizerOptions sgd;
  sgd.learning_rate = 0.1;
  ParameterStore a(sgd), b(sgd);
  REQUIRE(a.Initialize(*ModelLayout::Create({TensorSpec{"w", {1}}}), {1.0f}).ok());
  REQUIRE(b.Initialize(*ModelLayout::Create({TensorSpec{"w", {1}}}), {1.0f}).ok());
  a.Apply({2.0f}, Settings(0.25, 1.0, -1, 1.0, 0.25));
  b.Apply({2.0f}, Settings(0.25));
  REQUIRE(*a.weights() == *b.weights());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn

namespace omnilearn {
namespace server {
namespace {

// Plain SGD at rate 1: an Apply of ones takes every weight down by one.
OptimizerOptions UnitSgd() {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.momentum = 0;
  o.weight_decay = 0;
  return o;
}

TEST_CASE("a snapshot a reader holds is never overwritten; a released one is reused", "[store]") {
  ParameterStore s(UnitSgd());
  REQUIRE(s.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  std::shared_ptr<const std::vector<float>> held = s.weights();  // a pull in flight
  s.Apply({1, 1, 1, 1});
  s.Apply({1, 1, 1, 1});  // the spare is `held`: still read, so not reused
  REQUIRE(*held == std::vector<float>{0, 0, 0, 0});
  REQUIRE((*s.weights())[0] == -2);
  const float* before = s.weights()->data();
  s.Apply({1, 1, 1, 1});
  held.reset();
  s.Apply({1, 1, 1, 1});  // the snapshot of two steps ago, released: its storage is reused
  REQUIRE(s.weights()->data() == before);
  REQUIRE((*s.weights())[3] == -4);
}

TEST_CASE(
    "a step writes into an older snapshot a reader let go of: a checkpoint held across rounds costs no allocation",
    "[store]") {
  ParameterStore s(UnitSgd());
  REQUIRE(s.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  // Like a sharded job's in-memory checkpoint: a capture every round, the one before kept
  // until the next is in, so the snapshot before each step's is always held.
  std::deque<std::shared_ptr<const std::vector<float>>> captures;
  for (int step = 0; step < 10; ++step) {
    captures.push_back(s.weights());
    if (captures.size() > 2) captures.pop_front();
    s.Apply({1, 1, 1, 1});
  }
  REQUIRE(s.buffers_allocated() == 2);  // the first two steps'; then the capture let go two rounds ago
  REQUIRE((*s.weights())[0] == -10);
  REQUIRE(*captures[0] == std::vector<float>(4, -8));  // never overwritten while held
  REQUIRE(*captures[1] == std::vector<float>(4, -9));
}

TEST_CASE("optimizer state and predictions readers hold across rounds cost no allocation once let go", "[store]") {
  OptimizerOptions o = UnitSgd();
  o.momentum = 0.5;
  ParameterStore s(o);
  ParameterStore plain(o);  // the same steps, nothing held
  REQUIRE(s.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  REQUIRE(plain.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  // A checkpoint capturing the state every round and a pull serving the prediction, each
  // kept two rounds (the one before still being written or sent).
  std::deque<std::pair<OptimizerBuffers, std::vector<float>>> captures;
  std::deque<std::shared_ptr<const std::vector<float>>> served;
  for (int step = 0; step < 10; ++step) {
    const OptimizerBuffers state = s.OptimizerState();
    captures.emplace_back(state, *state[0].second);
    if (captures.size() > 2) captures.pop_front();
    const std::vector<float> update{1, 2, 3, 4};
    s.Apply(update);
    plain.Apply(update);
    s.Predict(1);
    served.push_back(s.served());
    if (served.size() > 2) served.pop_front();
  }
  // Snapshots 1; state 2 (two captures hold the two before); predictions 3 (two served
  // ones held when the third is made). The old single-spare rule allocated state and a
  // prediction at every step (21 here).
  REQUIRE(s.buffers_allocated() == 6);
  REQUIRE(*s.weights() == *plain.weights());
  REQUIRE(*s.OptimizerState()[0].second == *plain.OptimizerState()[0].second);
  for (const auto& [state, values] : captures) REQUIRE(*state[0].second == values);  // never written while held
  plain.Predict(1);
  REQUIRE(*served.back() == *plain.served());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn

namespace omnilearn {
namespace server {
namespace {

std::vector<std::vector<float>> StateValues(const ParameterStore& s) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, values] : s.OptimizerState()) out.push_back(*values);
  return out;
}

TEST_CASE("a captured optimizer state is not copied and not overwritten; the steps are as without it", "[store]") {
  // Larger than one range of the parallel step, so the copy on write runs range by range.
  const int64_t n = (1 << 18) * 2 + 1000;
  const ModelLayout layout = *ModelLayout::Create({TensorSpec{"w", {n}}});
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  ParameterStore captured(o), plain(o);
  REQUIRE(captured.Initialize(layout, std::vector<float>(n, 1.0f)).ok());
  REQUIRE(plain.Initialize(layout, std::vector<float>(n, 1.0f)).ok());
  auto gradient = [n](float base) {
    std::vector<float> g(n);
    for (int64_t i = 0; i < n; ++i) g[i] = base + static_cast<float>(i % 7) * 0.01f;
    return g;
  };
  auto step_both = [&](float base) {
    captured.Apply(gradient(base));
    plain.Apply(gradient(base));
  };
  step_both(0.5f);
  const float* in_place = captured.OptimizerState()[0].second->data();
  step_both(0.25f);
  REQUIRE(captured.OptimizerState()[0].second->data() == in_place);  // nobody held it: stepped in place

  OptimizerBuffers first = captured.OptimizerState();
  REQUIRE(first[0].second->data() == in_place);  // shared, not copied
  const std::vector<std::vector<float>> at_capture = StateValues(captured);
  step_both(-0.5f);
  step_both(0.75f);
  for (size_t i = 0; i < first.size(); ++i) REQUIRE(*first[i].second == at_capture[i]);
  REQUIRE(captured.OptimizerState()[0].second->data() != in_place);
  REQUIRE(StateValues(captured) == StateValues(plain));
  REQUIRE(*captured.weights() == *plain.weights());

  // Released, the first capture's buffers serve the step after the next capture.
  first.clear();
  OptimizerBuffers second = captured.OptimizerState();
  step_both(0.1f);
  REQUIRE(captured.OptimizerState()[0].second->data() == in_place);
  REQUIRE(StateValues(captured) == StateValues(plain));
  REQUIRE(*captured.weights() == *plain.weights());
}

TEST_CASE("Slices of a clipped model step as the whole model does: the norm is reduced over them") {
  // The whole model: a (2), b (2) and a buffer; its slices: {a, buffer} (the coordinator's,
  // whose store reduces through the options) and {b} (a shard's, given the total).
  const ModelLayout whole = *ModelLayout::Create({{"a", {2}}, {"b", {2}}, {"mean", {1}, true}});
  const ModelLayout first = *ModelLayout::Create({{"a", {2}}, {"mean", {1}, true}});
  const ModelLayout second = *ModelLayout::Create({{"b", {2}}});
  OptimizerOptions o;
  o.learning_rate = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0;
  o.clip_grad_norm = 2;
  const std::vector<float> update = {3, 4, 12, 0, 8}, u1 = {3, 4, 8}, u2 = {12, 0};
  ParameterStore model(o);
  REQUIRE(model.Initialize(whole, {1, 1, 1, 1, 0}).ok());
  OptimizerOptions coordinator = o;
  std::vector<uint64_t> reduced_at;
  coordinator.norm_reduction = [&](uint64_t version, double sum_squares) {
    reduced_at.push_back(version);
    return sum_squares + UpdateSumSquares(second, u2, 0.5);
  };
  ParameterStore slice0(coordinator), slice1(o);
  REQUIRE(slice0.Initialize(first, {1, 1, 0}).ok());
  REQUIRE(slice1.Initialize(second, {1, 1}).ok());
  for (int step = 0; step < 2; ++step) {  // the second step carries momentum
    model.Apply(update, Settings(1.0, 1.0, -1, 0.5));
    slice0.Apply(u1, Settings(1.0, 1.0, -1, 0.5));
    slice1.Apply(
        u2, Settings(1.0, 1.0, -1, 0.5, 1.0, UpdateSumSquares(first, u1, 0.5) + UpdateSumSquares(second, u2, 0.5)));
  }
  REQUIRE(reduced_at == std::vector<uint64_t>{0, 1});
  // |0.5 x (3, 4, 12, 0)| = 6.5: every parameter's update is scaled by 2 / 6.5; the buffer
  // takes half its update (update_scale), unclipped.
  const std::vector<float>& w = *model.weights();
  const std::vector<float>& w0 = *slice0.weights();
  const std::vector<float>& w1 = *slice1.weights();
  REQUIRE(w[0] == Approx(1 - 0.1 * (1 + 1.9) * 1.5 * 2 / 6.5));
  REQUIRE(w0[0] == Approx(w[0]).epsilon(1e-6));
  REQUIRE(w0[1] == Approx(w[1]).epsilon(1e-6));
  REQUIRE(w0[2] == Approx(4.0));
  REQUIRE(w[4] == Approx(4.0));
  REQUIRE(w1[0] == Approx(w[2]).epsilon(1e-6));
  REQUIRE(w1[1] == Approx(w[3]).epsilon(1e-6));
  // A slice alone (no reduction, no total) would clip by its own smaller norm: it differs.
  ParameterStore alone(o);
  REQUIRE(alone.Initialize(first, {1, 1, 0}).ok());
  alone.Apply(u1, Settings(1.0, 1.0, -1, 0.5));
  REQUIRE((*alone.weights())[0] != Approx(1 - 0.1 * 1.5 * 2 / 6.5));
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
