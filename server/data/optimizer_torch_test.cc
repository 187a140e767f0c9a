// The server's optimizers against LibTorch's own, on the same gradients: SGD with
// momentum and weight decay, Adam (L2), AdamW (decoupled), and global-norm clipping as
// torch::nn::utils::clip_grad_norm_ does it; each also with two param groups of their own
// rate and decay, and rates changed mid-run as a scheduler does. Same results to float
// tolerance.
#include <torch/torch.h>

#include <random>

#include "catch2/catch.hpp"
#include "server/data/parameter_store.h"

namespace omnilearn {
namespace server {
namespace {

constexpr int kSteps = 6;

// Two parameter tensors (and a buffer, which neither optimizer may touch).
ModelLayout Layout() {
  return *ModelLayout::Create(
      {TensorSpec{"a", {3, 4}}, TensorSpec{"bn.running_mean", {2}, true}, TensorSpec{"b", {5}}});
}

std::vector<float> Random(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

torch::Tensor Slice(const std::vector<float>& flat, int64_t offset, std::vector<int64_t> shape) {
  return torch::from_blob(const_cast<float*>(flat.data()) + offset, shape, torch::kFloat32).clone();
}

// Runs kSteps steps of ours and of `make_torch` on the same gradients (scaled by
// `grad_scale` to exercise clipping) and compares the parameters after each step.
// `new_rates`: each param group's rate from step kSteps / 2 on (a scheduler's), if any.
template <typename MakeTorch>
void Compare(const OptimizerOptions& o, MakeTorch make_torch, float grad_scale = 1.0f, double clip = 0,
             std::vector<double> new_rates = {}) {
  std::mt19937 rng(42);
  const ModelLayout layout = Layout();
  const std::vector<float> init = Random(layout.total_elements(), rng, 1.0f);
  ParameterStore ours(o);
  REQUIRE(ours.Initialize(layout, init).ok());
  std::vector<torch::Tensor> params = {Slice(init, layout.offset(0), {3, 4}).requires_grad_(true),
                                       Slice(init, layout.offset(2), {5}).requires_grad_(true)};
  std::unique_ptr<torch::optim::Optimizer> theirs = make_torch(params);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> grad = Random(layout.total_elements(), rng, grad_scale);
    for (int64_t i = 0; i < layout.size(1); ++i) grad[layout.offset(1) + i] = 7.0f;  // buffer values
    if (step == kSteps / 2 && !new_rates.empty()) {
      REQUIRE(ours.SetGroupRates(new_rates).ok());
      for (size_t g = 0; g < new_rates.size(); ++g) theirs->param_groups()[g].options().set_lr(new_rates[g]);
    }
    ours.Apply(grad);
    params[0].mutable_grad() = Slice(grad, layout.offset(0), {3, 4});
    params[1].mutable_grad() = Slice(grad, layout.offset(2), {5});
    if (clip > 0) torch::nn::utils::clip_grad_norm_(params, clip);
    theirs->step();
    const std::vector<float>& w = *ours.weights();
    for (int t = 0; t < 2; ++t) {
      const int index = t == 0 ? 0 : 2;
      torch::Tensor mine = Slice(w, layout.offset(index), params[t].sizes().vec());
      INFO("step " << step << " tensor " << t << "\nours:\n" << mine << "\ntorch:\n" << params[t]);
      REQUIRE(torch::allclose(mine, params[t].detach(), /*rtol=*/1e-5, /*atol=*/1e-6));
    }
    REQUIRE(w[layout.offset(1)] == 7.0f);  // the buffer took the pushed value
  }
}

TEST_CASE("SGD with momentum and weight decay matches torch::optim::SGD", "[optimizer][torch]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  Compare(o, [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  });
}

TEST_CASE("Adam matches torch::optim::Adam", "[optimizer][torch]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.learning_rate = 0.01;
  o.beta1 = 0.8;
  o.beta2 = 0.99;
  o.eps = 1e-6;
  o.weight_decay = 0.05;
  Compare(o, [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(
        p, torch::optim::AdamOptions(0.01).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.05));
  });
}

TEST_CASE("AdamW matches torch::optim::AdamW", "[optimizer][torch]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.learning_rate = 0.01;
  o.weight_decay = 0.1;
  Compare(o, [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(p, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  });
}

TEST_CASE("global-norm clipping matches clip_grad_norm_", "[optimizer][torch]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = 0.1;
  o.momentum = 0.5;
  o.weight_decay = 0;
  o.clip_grad_norm = 1.0;
  // Gradients of norm ~20: every step is clipped.
  Compare(
      o,
      [](std::vector<torch::Tensor> p) {
        return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.5));
      },
      /*grad_scale=*/5.0f, /*clip=*/1.0);
}

// Tensor "a" in group 0 at (lr0, wd0), "b" in group 1 at (lr1, wd1): ours and torch's.
OptimizerOptions WithGroups(OptimizerOptions o, double lr1, double wd1) {
  o.groups = {ParamGroup{{0}, o.learning_rate, o.weight_decay}, ParamGroup{{2}, lr1, wd1}};
  return o;
}

template <typename Options>
std::vector<torch::optim::OptimizerParamGroup> TorchGroups(const std::vector<torch::Tensor>& p, Options first,
                                                           Options second) {
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p[0]}, std::make_unique<Options>(first));
  groups.emplace_back(std::vector<torch::Tensor>{p[1]}, std::make_unique<Options>(second));
  return groups;
}

TEST_CASE("SGD with two param groups and a scheduler's rates matches torch::optim::SGD", "[optimizer][torch]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  Compare(WithGroups(o, 0.03, 0),
          [](std::vector<torch::Tensor> p) {
            using O = torch::optim::SGDOptions;
            return std::make_unique<torch::optim::SGD>(
                TorchGroups(p, O(0.1).momentum(0.9).weight_decay(0.01), O(0.03).momentum(0.9)), O(0.1));
          },
          1.0f, 0, {0.05, 0.01});
}

TEST_CASE("Adam with two param groups and a scheduler's rates matches torch::optim::Adam", "[optimizer][torch]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  o.learning_rate = 0.01;
  o.weight_decay = 0.05;
  Compare(WithGroups(o, 0.002, 0),
          [](std::vector<torch::Tensor> p) {
            using O = torch::optim::AdamOptions;
            return std::make_unique<torch::optim::Adam>(TorchGroups(p, O(0.01).weight_decay(0.05), O(0.002)), O(0.01));
          },
          1.0f, 0, {0.005, 0.001});
}

TEST_CASE("AdamW with two param groups (no decay on the second) matches torch::optim::AdamW", "[optimizer][torch]") {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.learning_rate = 0.01;
  o.weight_decay = 0.1;
  o.clip_grad_norm = 1.0;
  Compare(WithGroups(o, 0.01, 0),
          [](std::vector<torch::Tensor> p) {
            using O = torch::optim::AdamWOptions;
            return std::make_unique<torch::optim::AdamW>(
                TorchGroups(p, O(0.01).weight_decay(0.1), O(0.01).weight_decay(0)), O(0.01));
          },
          5.0f, 1.0, {0.001, 0.001});
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
