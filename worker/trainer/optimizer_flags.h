// The C++ worker's --optimizer flags as the job's optimizer (JoinHeader.optimizer), the
// same contract as the Python worker's optimizer= (omnilearn.optim): what is left out is
// torch.optim's default for that optimizer, so `--optimizer=adamw --lr=3e-4` runs
// torch.optim.AdamW(params, lr=3e-4).
#ifndef OMNILEARN_WORKER_TRAINER_OPTIMIZER_FLAGS_H_
#define OMNILEARN_WORKER_TRAINER_OPTIMIZER_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/client/ps_types.h"

namespace omnilearn {
namespace worker {

// Negative (or empty): torch.optim's default for `kind`.
struct OptimizerFlags {
  std::string kind;  // sgd | adam | adamw; empty: the job's optimizer (the server's flags)
  double lr = -1;
  double momentum = -1;      // sgd
  double weight_decay = -1;  // sgd, adam: L2; adamw: decoupled
  std::string betas;         // adam, adamw: "B1,B2"
  double eps = -1;           // adam, adamw
  // Parameters whose names end with one of these go to a second param group without
  // weight decay (the usual recipe: "bias", "norm.weight"); empty: one group.
  std::vector<std::string> no_decay;
};

// The optimizer to join with, for a model of `parameter_names` (trainable tensors, layout
// order); none when `kind` is empty. InvalidArgument naming the flag otherwise.
absl::StatusOr<std::optional<OptimizerChoice>> OptimizerFromFlags(const OptimizerFlags& f,
                                                                  const std::vector<std::string>& parameter_names);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_OPTIMIZER_FLAGS_H_
