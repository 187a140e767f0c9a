#include "server/async_rule.h"

#include <algorithm>

namespace omnilearn {
namespace server {

AsyncStep AsyncStepFor(int64_t batch, int64_t global_batch, size_t live, uint64_t staleness, double momentum) {
  const double share = static_cast<double>(batch) / static_cast<double>(global_batch);
  const double n = static_cast<double>(std::max<size_t>(1, live));
  AsyncStep step;
  step.lr_scale = share * std::min(1.0, n / (1.0 + static_cast<double>(staleness)));
  step.buffer_blend = std::min(1.0, share);
  step.momentum = std::max(0.0, momentum - (1.0 - 1.0 / n));
  return step;
}

}  // namespace server
}  // namespace omnilearn
