#include "server/control/async_rule.h"

#include <algorithm>

namespace omnilearn {
namespace server {

AsyncStep AsyncStepFor(int64_t batch, int64_t global_batch, size_t live, uint64_t staleness, double momentum,
                       AsyncRuleOptions rule) {
  const double n = static_cast<double>(std::max<size_t>(1, live));
  const double share = rule.lr_scaling ? static_cast<double>(batch) / static_cast<double>(global_batch) : 1.0 / n;
  AsyncStep step;
  step.lr_scale = share * (rule.staleness_damping ? std::min(1.0, n / (1.0 + static_cast<double>(staleness))) : 1.0);
  step.buffer_blend = std::min(1.0, share);
  step.momentum = rule.staleness_damping ? std::max(0.0, momentum - (1.0 - 1.0 / n)) : momentum;
  step.sample_share = rule.adam_sqrt_scaling ? std::min(1.0, share) : 1.0;
  return step;
}

}  // namespace server
}  // namespace omnilearn
