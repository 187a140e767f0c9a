#include "server/control/optimizer_mirror.h"

#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace server {

absl::StatusOr<OptimizerOptions> MirrorOptimizer(const WantedOptimizer& wanted, const OptimizerOptions& job,
                                                 const ModelLayout& layout) {
  OptimizerOptions o = job;
  o.kind = wanted.kind;
  o.learning_rate = wanted.lr;
  o.momentum = wanted.kind == OptimizerKind::kSgd ? wanted.momentum : job.momentum;
  o.weight_decay = wanted.weight_decay;
  if (wanted.kind != OptimizerKind::kSgd) {
    o.beta1 = wanted.beta1;
    o.beta2 = wanted.beta2;
    o.eps = wanted.eps;
  }
  o.groups.clear();
  for (const WantedOptimizer::Group& g : wanted.groups) {
    ParamGroup group{{}, g.lr, g.weight_decay};
    for (const std::string& name : g.tensors) {
      const int t = layout.Find(name);
      if (t < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("the optimizer's param group ", o.groups.size(), " names '", name, "', not in the model"));
      }
      group.tensors.push_back(t);
    }
    o.groups.push_back(std::move(group));
  }
  if (absl::Status s = ValidateOptimizerOptions(o); !s.ok()) return s;
  return o;
}

absl::Status CheckSameOptimizer(const OptimizerOptions& worker, const OptimizerOptions& job, const std::string& why) {
  const bool adam = worker.kind != OptimizerKind::kSgd;
  const bool same = worker.kind == job.kind && worker.learning_rate == job.learning_rate &&
                    worker.weight_decay == job.weight_decay && worker.groups == job.groups &&
                    (adam ? worker.beta1 == job.beta1 && worker.beta2 == job.beta2 && worker.eps == job.eps
                          : worker.momentum == job.momentum);
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("this worker's optimizer is ", DescribeOptimizer(worker),
                                                    "; the job runs ", DescribeOptimizer(job), " (", why,
                                                    "): build the same optimizer, or none to take the job's"));
}

}  // namespace server
}  // namespace omnilearn
