// A round of local steps alone: no session, no server. A small MLP on synthetic data on the CPU.
#include "worker/trainer/local_round.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "worker/trainer/step_runner_testing.h"

namespace omnilearn {
namespace worker {
namespace {

// A step's rig and a runner on it.
struct Rig : StepRig {
  Rig() : runner(std::make_unique<StepRunner>(false, &setup, params.get(), &timing, &series, &progress)) {}
  std::unique_ptr<StepRunner> runner;
};

OptimizerChoice Sgd(double lr, double momentum) {
  OptimizerChoice c;
  c.kind = "sgd";
  c.lr = lr;
  c.momentum = momentum;
  return c;
}

// The same steps written out: the model (same seed), torch::optim::SGD, the parts of `idx`.
std::vector<float> SteppedBySgd(const Dataset& data, const std::vector<torch::Tensor>& parts, double lr,
                                double momentum, double* loss) {
  std::unique_ptr<Model> model = *MakeModel("mlp", 3);
  FlatModel flat(model.get());
  std::vector<torch::Tensor> all;
  for (auto& [name, t] : model->Parameters()) all.push_back(t);
  torch::optim::SGD sgd(all, torch::optim::SGDOptions(lr).momentum(momentum));
  double sum = 0;
  int64_t n = 0;
  for (const torch::Tensor& p : parts) {
    sgd.zero_grad();
    torch::Tensor l = torch::nn::functional::cross_entropy(model->Forward(data.images.index_select(0, p)),
                                                           data.labels.index_select(0, p));
    l.backward();
    sgd.step();
    sum += l.item<double>() * static_cast<double>(p.size(0));
    n += p.size(0);
  }
  *loss = sum / static_cast<double>(n);
  return flat.Values();
}

TEST_CASE("a round: the steps of the worker's optimizer on near-equal parts, the pseudo-gradient pushed",
          "[local_round]") {
  Rig rig;
  const std::vector<float> start = rig.params->Values();
  std::unique_ptr<LocalRound> round = *LocalRound::Create(Sgd(0.1, 0.9), rig.setup.model.get());
  const torch::Tensor idx = torch::arange(0, 11, torch::kInt64);
  std::vector<float> update(start.size(), 7.0f);
  const StepResult r = round->Run(idx, 4, rig.runner.get(), rig.params.get(), &update);
  REQUIRE_FALSE(r.out_of_memory);
  REQUIRE(r.compute_seconds > 0);
  double want_loss = 0;
  const std::vector<torch::Tensor> parts = {torch::arange(0, 3, torch::kInt64), torch::arange(3, 6, torch::kInt64),
                                            torch::arange(6, 9, torch::kInt64), torch::arange(9, 11, torch::kInt64)};
  const std::vector<float> want = SteppedBySgd(rig.setup.train, parts, 0.1, 0.9, &want_loss);
  REQUIRE(r.loss == Approx(want_loss).epsilon(1e-6));
  const std::vector<float> end = rig.params->Values();  // the round's steps stay until the reply
  double moved = 0;
  for (size_t i = 0; i < end.size(); ++i) {
    REQUIRE(end[i] == Approx(want[i]).margin(1e-6));
    REQUIRE(update[i] == Approx(start[i] - end[i]).margin(1e-6));  // the MLP has no buffers
    moved = std::max(moved, std::abs(static_cast<double>(update[i])));
  }
  REQUIRE(moved > 1e-3);

  // The optimizer's state stays from round to round: a second round with momentum differs
  // from one of a fresh optimizer.
  rig.params->Load(start);
  std::vector<float> second(start.size());
  round->Run(idx, 4, rig.runner.get(), rig.params.get(), &second);
  double apart = 0;
  for (size_t i = 0; i < second.size(); ++i) apart = std::max(apart, std::abs(double{second[i]} - update[i]));
  REQUIRE(apart > 1e-4);
}

TEST_CASE("a round's param groups keep their own rates; kinds and groups it cannot step are refused", "[local_round]") {
  Rig rig;
  std::vector<std::string> names;
  for (auto& [name, t] : rig.setup.model->Parameters()) names.push_back(name);
  OptimizerChoice adam;
  adam.kind = "adam";
  adam.lr = 0.01;
  adam.beta1 = 0.9;
  adam.beta2 = 0.999;
  adam.eps = 1e-8;
  adam.groups = {{{names.begin(), names.end() - 1}, 0.01, 0}, {{names.back()}, 0.0, 0}};  // the last one frozen
  std::unique_ptr<LocalRound> round = *LocalRound::Create(adam, rig.setup.model.get());
  const std::vector<float> start = rig.params->Values();
  std::vector<float> update(start.size());
  round->Run(torch::arange(0, 8, torch::kInt64), 2, rig.runner.get(), rig.params.get(), &update);
  const int64_t last = rig.setup.model->Parameters().back().second.numel();
  for (size_t i = update.size() - last; i < update.size(); ++i) REQUIRE(update[i] == 0.0f);
  REQUIRE(update.front() != 0.0f);

  OptimizerChoice rmsprop = Sgd(0.1, 0);
  rmsprop.kind = "rmsprop";
  REQUIRE(absl::StrContains(LocalRound::Create(rmsprop, rig.setup.model.get()).status().message(),
                            "steps sgd, adam or adamw"));
  OptimizerChoice stray = Sgd(0.1, 0);
  stray.groups = {{{"no.such.weight"}, 0.1, 0}};
  REQUIRE(absl::StrContains(LocalRound::Create(stray, rig.setup.model.get()).status().message(),
                            "'no.such.weight', which is no parameter"));
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
