// A worker's own optimizer (a torch.optim object, JoinHeader.optimizer) as the job's: the
// rules of adopting it and of later workers matching it. Pure functions; the core calls
// them under its lock.
#ifndef OMNILEARN_SERVER_CONTROL_OPTIMIZER_MIRROR_H_
#define OMNILEARN_SERVER_CONTROL_OPTIMIZER_MIRROR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_layout.h"
#include "server/data/parameter_store.h"

namespace omnilearn {
namespace server {

// What the worker's program built, param groups by tensor name.
struct WantedOptimizer {
  struct Group {
    std::vector<std::string> tensors;
    double lr = 0;
    double weight_decay = 0;
    HyperMap hyper;  // the group's own hyperparameters
  };
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0;
  // Every hyperparameter by name (OptimizerSpec.options); empty from a worker of an earlier
  // release, whose fields above say it all.
  HyperMap hyper;
  std::vector<Group> groups;  // empty: one group of every parameter
};

// The job's options (`job`: the flags', whose schedule, warm-up and clipping stay) with
// the worker's optimizer: its kind, rate, decay, every other hyperparameter and param groups
// (names resolved to `layout`'s indices; `pieces`: `layout` is a sharded job's slice,
// ResolveGroupNames). InvalidArgument naming a value out of range or a tensor the layout
// does not hold.
absl::StatusOr<OptimizerOptions> MirrorOptimizer(const WantedOptimizer& wanted, const OptimizerOptions& job,
                                                 const ModelLayout& layout, bool pieces = false);

// A worker's mirrored optimizer against the job's: FailedPrecondition naming both unless
// they run the same steps (SameSteps). `why` says
// where the job's comes from (its flags, the first worker, a checkpoint).
absl::Status CheckSameOptimizer(const OptimizerOptions& worker, const OptimizerOptions& job, const std::string& why);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_OPTIMIZER_MIRROR_H_
