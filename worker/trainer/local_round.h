// Local steps on the C++ worker (the server's --local_steps or --local_batch): a round's
// samples split into steps (LocalRoundSteps), each a StepRunner step followed by a step of
// the worker's own optimizer (its --optimizer flags as a torch::optim, whose state stays
// here from round to round); then the round's pseudo-gradient for the push: the weights it
// started from less those it ended with, and the buffers' values (FlatModel::Difference).
// The server's optimizer is the outer one. python/omnilearn/session.py's _push_local is the
// Python worker's side of the same round.
#ifndef OMNILEARN_WORKER_TRAINER_LOCAL_ROUND_H_
#define OMNILEARN_WORKER_TRAINER_LOCAL_ROUND_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/client/ps_types.h"
#include "worker/trainer/flat_model.h"
#include "worker/trainer/model.h"
#include "worker/trainer/step_runner.h"

namespace omnilearn {
namespace worker {

class LocalRound {
 public:
  // The optimizer `choice` names (sgd, adam or adamw, with its param groups) over `model`'s
  // parameters. InvalidArgument for another kind, or a group naming a tensor the model's
  // parameters do not hold.
  static absl::StatusOr<std::unique_ptr<LocalRound>> Create(const OptimizerChoice& choice, Model* model);

  // Trains the samples `idx` in `steps` near-equal steps of `runner`, each followed by the
  // optimizer's step; then writes the round's pseudo-gradient into `update` (sized to the
  // model; the steps' gradients pass through it). The result: the steps' compute summed,
  // their loss weighted by their samples. Out of memory in a step: the round is given up,
  // its steps undone (the parameters and buffers it started from).
  StepResult Run(const torch::Tensor& idx, int64_t steps, StepRunner* runner, FlatModel* params,
                 std::vector<float>* update);

 private:
  explicit LocalRound(std::unique_ptr<torch::optim::Optimizer> optimizer) : optimizer_(std::move(optimizer)) {}

  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_LOCAL_ROUND_H_
