// The store's arithmetic in closed form: schedules, clipping, buffers, state names.
// server/optimizer_torch_test.cc checks the optimizers against LibTorch's own.
#include "server/parameter_store.h"

#include <cmath>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

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
  REQUIRE(absl::StrContains(ParseOptimizer("lion").status().message(), "sgd, adam or adamw"));
  REQUIRE(absl::StrContains(ParseLrSchedule("linear").status().message(), "constant, step or cosine"));
}

TEST_CASE("Clipping scales the parameters' gradient to the norm; buffers are not gradients") {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.momentum = 0;
  o.weight_decay = 0;
  o.clip_grad_norm = 1.0;
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(true), {0, 0, 0, 0}).ok());
  s.Apply({3, 4, 100, 100}, 1.0);  // norm 5 -> 1; the buffer's 100s are values
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
  plain.Apply({1, 1, 1, 1}, 1.0);
  for (int i = 0; i < 4; ++i) {
    const float w0 = static_cast<float>(i + 1);
    REQUIRE((*plain.weights())[i] == Approx(w0 - 0.5f * (1 + 0.1f * w0)));
  }
  // momentum 0.9, a first step damped to momentum 0: its velocity is the next step's.
  o.momentum = 0.9;
  o.weight_decay = 0;
  ParameterStore damped(o);
  REQUIRE(damped.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  damped.Apply({1, 1, 1, 1}, 1.0, 1.0, /*momentum=*/0);
  REQUIRE((*damped.weights())[0] == Approx(-0.5));
  damped.Apply({0, 0, 0, 0}, 1.0);  // v = 0.9 * 1 + 0
  REQUIRE((*damped.weights())[0] == Approx(-0.5 - 0.45));
}

TEST_CASE("Buffers take the update's values (sync) or blend toward them (async)") {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.momentum = 0;
  o.weight_decay = 0;
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(true), {1, 1, 2, 4}).ok());
  s.Apply({0, 0, 6, 8}, 1.0, /*buffer_blend=*/0.25);
  const std::vector<float>& w = *s.weights();
  REQUIRE(w[0] == 1);            // zero gradient
  REQUIRE(w[2] == Approx(3.0));  // 2 + 0.25 * (6 - 2)
  REQUIRE(w[3] == Approx(5.0));
  REQUIRE((*s.OptimizerState()[0].second)[2] == 0);  // no optimizer state moves for a buffer
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
}

}  // namespace
}  // namespace server
}  // namespace omnilearn

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a snapshot a reader holds is never overwritten; a released one is reused", "[store]") {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.momentum = 0;
  o.weight_decay = 0;
  ParameterStore s(o);
  REQUIRE(s.Initialize(TwoTensors(false), {0, 0, 0, 0}).ok());
  std::shared_ptr<const std::vector<float>> held = s.weights();  // a pull in flight
  s.Apply({1, 1, 1, 1}, 1.0);
  s.Apply({1, 1, 1, 1}, 1.0);  // the spare is `held`: still read, so not reused
  REQUIRE(*held == std::vector<float>{0, 0, 0, 0});
  REQUIRE((*s.weights())[0] == -2);
  const float* before = s.weights()->data();
  s.Apply({1, 1, 1, 1}, 1.0);
  held.reset();
  s.Apply({1, 1, 1, 1}, 1.0);  // the snapshot of two steps ago, released: its storage is reused
  REQUIRE(s.weights()->data() == before);
  REQUIRE((*s.weights())[3] == -4);
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
    captured.Apply(gradient(base), 1.0);
    plain.Apply(gradient(base), 1.0);
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

}  // namespace
}  // namespace server
}  // namespace omnilearn
