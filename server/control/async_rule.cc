#include "server/control/async_rule.h"

#include <algorithm>
#include <cmath>

namespace omnilearn {
namespace server {

StepSettings AsyncStepFor(int64_t batch, int64_t global_batch, size_t live, uint64_t staleness, double momentum,
                          AsyncRuleOptions rule, bool predicted) {
  const double n = static_cast<double>(std::max<size_t>(1, live));
  const double share = rule.lr_scaling ? static_cast<double>(batch) / static_cast<double>(global_batch) : 1.0 / n;
  StepSettings step;
  step.lr_scale = share * (rule.staleness_damping ? std::min(1.0, n / (1.0 + static_cast<double>(staleness))) : 1.0);
  step.buffer_blend = std::min(1.0, share);
  step.momentum_cut = rule.staleness_damping && !predicted ? 1.0 - 1.0 / n : 0.0;
  if (step.momentum_cut > 0) step.momentum = std::max(0.0, momentum - step.momentum_cut);  // group 0's
  step.sample_share = rule.adam_sqrt_scaling ? std::min(1.0, share) : 1.0;
  return step;
}

namespace {

// The displacement of an Adam step, up to the learning rate and the moments' direction.
double StepSize(const StepSettings& step) { return step.lr_scale / std::sqrt(std::max(step.sample_share, 1e-12)); }

}  // namespace

double PredictedSteps(const StepSettings& own, double own_interval, const std::vector<PeerPace>& peers,
                      int64_t global_batch, AsyncRuleOptions rule) {
  const double own_size = StepSize(own);
  if (!(own_size > 0)) return 0;
  const size_t live = peers.size() + 1;
  double steps = 0;
  for (const PeerPace& p : peers) {
    if (p.batch <= 0) continue;
    const double pushes =
        own_interval > 0 && p.push_interval > 0 ? std::clamp(own_interval / p.push_interval, 0.125, 8.0) : 1.0;
    // Undamped: a peer pushing in turn is n - 1 versions behind.
    const StepSettings theirs = AsyncStepFor(p.batch, global_batch, live, live - 1, 0, rule);
    steps += pushes * StepSize(theirs) / own_size;
  }
  return std::min(steps, kMaxPredictedSteps);
}

}  // namespace server
}  // namespace omnilearn
