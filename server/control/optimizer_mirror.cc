#include "server/control/optimizer_mirror.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace server {

absl::StatusOr<OptimizerOptions> MirrorOptimizer(const WantedOptimizer& wanted, const OptimizerOptions& job,
                                                 const ModelLayout& layout, bool pieces) {
  OptimizerOptions o = job;
  o.kind = wanted.kind;
  o.learning_rate = wanted.lr;
  o.weight_decay = wanted.weight_decay;
  // The typed fields where the worker's rule reads them (a worker of an earlier release
  // says all there); its hyper map, when it sent one, names every option and wins.
  auto reads = [&wanted](Hp hp) {
    const auto& hyper = RuleOf(wanted.kind).hyper;
    return std::any_of(hyper.begin(), hyper.end(), [hp](const std::pair<Hp, double>& p) { return p.first == hp; });
  };
  if (reads(Hp::kMomentum)) o.momentum = wanted.momentum;
  if (reads(Hp::kBeta1)) o.beta1 = wanted.beta1;
  if (reads(Hp::kBeta2)) o.beta2 = wanted.beta2;
  if (reads(Hp::kEps) && wanted.eps != 0) o.eps = wanted.eps;
  o.hyper = wanted.hyper;
  o.groups.clear();
  for (const WantedOptimizer::Group& g : wanted.groups)
    o.groups.push_back({{}, g.lr, g.weight_decay, g.hyper, g.tensors});
  if (absl::Status s = ResolveGroupNames(layout, pieces, &o.groups); !s.ok()) return s;
  if (absl::Status s = ValidateOptimizerOptions(o); !s.ok()) return s;
  return o;
}

absl::Status CheckSameOptimizer(const OptimizerOptions& worker, const OptimizerOptions& job, const std::string& why) {
  const bool same = SameSteps(worker, job);
  if (same) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("this worker's optimizer is ", DescribeOptimizer(worker),
                                                    "; the job runs ", DescribeOptimizer(job), " (", why,
                                                    "): build the same optimizer, or none to take the job's"));
}

}  // namespace server
}  // namespace omnilearn
