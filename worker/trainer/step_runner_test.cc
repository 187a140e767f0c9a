// One step's compute alone: no session, no server. A small MLP on synthetic data on the CPU.
#include "worker/trainer/step_runner.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "worker/trainer/step_runner_testing.h"

namespace omnilearn {
namespace worker {
namespace {

using Rig = StepRig;

// The gradient autograd gives the same model (same seed) on the same samples, flat.
std::vector<float> ReferenceGradient(const Dataset& data, const torch::Tensor& idx, double* loss) {
  std::unique_ptr<Model> model = *MakeModel("mlp", 3);
  FlatModel flat(model.get());
  torch::Tensor l = torch::nn::functional::cross_entropy(model->Forward(data.images.index_select(0, idx)),
                                                         data.labels.index_select(0, idx));
  l.backward();
  *loss = l.item<double>();
  std::vector<float> grad(flat.Values().size(), 0.0f);
  for (size_t i = 0; i < flat.size(); ++i) flat.CopyOne(static_cast<int>(i), &grad);
  return grad;
}

TEST_CASE("a step's gradient and loss are autograd's on the given samples, its time measured", "[step_runner]") {
  Rig rig;
  StepRunner runner(/*warmup=*/false, &rig.setup, rig.params.get(), &rig.timing, &rig.series, &rig.progress);
  const torch::Tensor idx = torch::tensor({3, 14, 15, 92, 65}, torch::kInt64);
  std::vector<float> grad(rig.layout.total_elements(), 7.0f);
  const StepResult r = runner.Run(idx, 5, &grad, nullptr);
  double want_loss = 0;
  const std::vector<float> want = ReferenceGradient(rig.setup.train, idx, &want_loss);
  REQUIRE_FALSE(r.out_of_memory);
  REQUIRE(r.compute_seconds > 0);
  REQUIRE(r.loss == Approx(want_loss).epsilon(1e-6));
  REQUIRE(grad.size() == want.size());
  for (size_t i = 0; i < grad.size(); ++i) REQUIRE(grad[i] == Approx(want[i]).margin(1e-6));
  REQUIRE(rig.notes.empty());

  // A second step on the same samples: the gradient is the step's, not the sum of two.
  const StepResult again = runner.Run(idx, 5, &grad, nullptr);
  REQUIRE(again.loss == Approx(want_loss).epsilon(1e-6));
  for (size_t i = 0; i < grad.size(); ++i) REQUIRE(grad[i] == Approx(want[i]).margin(1e-6));
}

TEST_CASE("each parameter is announced once, its gradient already in the buffer", "[step_runner]") {
  Rig rig;
  StepRunner runner(/*warmup=*/false, &rig.setup, rig.params.get(), &rig.timing, &rig.series, &rig.progress);
  const torch::Tensor idx = torch::arange(8, torch::kInt64);
  std::vector<float> grad(rig.layout.total_elements(), 0.0f);
  std::multiset<int> announced;
  bool all_written = true;
  const auto ready = [&](int i) {
    announced.insert(i);
    bool any = false;  // a gradient of many values is not all zeros once copied
    for (int64_t k = 0; k < rig.layout.size(i); ++k) any = any || grad[rig.layout.offset(i) + k] != 0.0f;
    all_written = all_written && any;
  };
  runner.Run(idx, 8, &grad, ready);
  REQUIRE(announced.size() == rig.layout.tensors().size());  // the MLP has parameters only
  REQUIRE(std::set<int>(announced.begin(), announced.end()).size() == announced.size());
  REQUIRE(all_written);

  // After the step the notices stop: backward elsewhere announces nothing.
  announced.clear();
  torch::nn::functional::cross_entropy(rig.setup.model->Forward(rig.setup.train.images.narrow(0, 0, 2)),
                                       rig.setup.train.labels.narrow(0, 0, 2))
      .backward();
  REQUIRE(announced.empty());
}

TEST_CASE("with warm-up, an untimed step at each new batch size, said once per size", "[step_runner]") {
  Rig rig;
  StepRunner runner(/*warmup=*/true, &rig.setup, rig.params.get(), &rig.timing, &rig.series, &rig.progress);
  std::vector<float> grad(rig.layout.total_elements(), 0.0f);
  for (int64_t batch : {4, 4, 6, 6, 4}) runner.Run(torch::arange(batch, torch::kInt64), batch, &grad, nullptr);
  REQUIRE(rig.notes == std::vector<std::string>{"[t0] untimed warm-up step at batch 4",
                                                "[t0] untimed warm-up step at batch 6",
                                                "[t0] untimed warm-up step at batch 4"});
  // The warm-up leaves no trace in the gradient: it is the timed step's alone.
  const torch::Tensor idx = torch::arange(4, torch::kInt64);
  double want_loss = 0;
  const std::vector<float> want = ReferenceGradient(rig.setup.train, idx, &want_loss);
  StepRunner fresh(/*warmup=*/true, &rig.setup, rig.params.get(), &rig.timing, &rig.series, &rig.progress);
  fresh.Run(idx, 4, &grad, nullptr);
  for (size_t i = 0; i < grad.size(); ++i) REQUIRE(grad[i] == Approx(want[i]).margin(1e-6));
}

TEST_CASE("an evaluation counts the right answers", "[step_runner]") {
  Rig rig;
  const double accuracy = Evaluate(rig.setup.model.get(), rig.setup.test, rig.setup.device);
  torch::NoGradGuard no_grad;
  const torch::Tensor predicted = rig.setup.model->Forward(rig.setup.test.images).argmax(1);
  const double want = predicted.eq(rig.setup.test.labels).sum().item<int64_t>() / 10.0;
  REQUIRE(accuracy == Approx(want));
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
