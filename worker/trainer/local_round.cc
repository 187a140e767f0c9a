#include "worker/trainer/local_round.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace worker {
namespace {

struct Group {
  std::vector<torch::Tensor> params;
  double lr = 0;
  double weight_decay = 0;
};

// torch.optim's param groups of `choice` over the model's parameters (one of them all when
// it names none).
absl::StatusOr<std::vector<Group>> GroupsOf(const OptimizerChoice& choice, Model* model) {
  std::map<std::string, torch::Tensor> named;
  std::vector<torch::Tensor> all;
  for (auto& [name, t] : model->Parameters()) {
    named[name] = t;
    all.push_back(t);
  }
  if (choice.groups.empty()) return std::vector<Group>{{all, choice.lr, choice.weight_decay}};
  std::vector<Group> groups;
  for (const OptimizerChoice::Group& g : choice.groups) {
    Group group{{}, g.lr, g.weight_decay};
    for (const std::string& name : g.tensors) {
      auto it = named.find(name);
      if (it == named.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the optimizer's group names '", name, "', which is no parameter of the model"));
      }
      group.params.push_back(it->second);
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

// The torch::optim `Optimizer` over `groups`, each group's options those `options` makes of it.
template <typename Optimizer, typename Options, typename MakeOptions>
std::unique_ptr<torch::optim::Optimizer> Build(const std::vector<Group>& groups, const MakeOptions& options) {
  std::vector<torch::optim::OptimizerParamGroup> param_groups;
  for (const Group& g : groups) param_groups.emplace_back(g.params, std::make_unique<Options>(options(g)));
  return std::make_unique<Optimizer>(std::move(param_groups), options(groups.front()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalRound>> LocalRound::Create(const OptimizerChoice& choice, Model* model) {
  absl::StatusOr<std::vector<Group>> groups = GroupsOf(choice, model);
  if (!groups.ok()) return groups.status();
  const std::tuple<double, double> betas{choice.beta1, choice.beta2};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (choice.kind == "sgd") {
    optimizer = Build<torch::optim::SGD, torch::optim::SGDOptions>(*groups, [&](const Group& g) {
      return torch::optim::SGDOptions(g.lr).momentum(choice.momentum).weight_decay(g.weight_decay);
    });
  } else if (choice.kind == "adam") {
    optimizer = Build<torch::optim::Adam, torch::optim::AdamOptions>(*groups, [&](const Group& g) {
      return torch::optim::AdamOptions(g.lr).betas(betas).eps(choice.eps).weight_decay(g.weight_decay);
    });
  } else if (choice.kind == "adamw") {
    optimizer = Build<torch::optim::AdamW, torch::optim::AdamWOptions>(*groups, [&](const Group& g) {
      return torch::optim::AdamWOptions(g.lr).betas(betas).eps(choice.eps).weight_decay(g.weight_decay);
    });
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("local steps with optimizer '", choice.kind, "': the C++ worker steps sgd, adam or adamw"));
  }
  return std::unique_ptr<LocalRound>(new LocalRound(std::move(optimizer)));
}

StepResult LocalRound::Run(const torch::Tensor& idx, int64_t steps, StepRunner* runner, FlatModel* params,
                           std::vector<float>* update) {
  const std::vector<float> start = params->Values();
  StepResult round;
  for (const torch::Tensor& part : idx.tensor_split(steps)) {
    const int64_t n = part.size(0);
    const StepResult step = runner->Run(part, n, update, nullptr);
    if (step.out_of_memory) {
      params->Load(start);  // the round's steps undone: the model the server gave
      return step;
    }
    optimizer_->step();  // on the gradient backward left in the parameters
    round.compute_seconds += step.compute_seconds;
    round.loss += step.loss * static_cast<double>(n);
  }
  round.loss /= static_cast<double>(idx.size(0));
  params->Difference(start, update);
  return round;
}

}  // namespace worker
}  // namespace omnilearn
