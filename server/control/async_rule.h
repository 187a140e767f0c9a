// The asynchronous staleness rule, as a pure function. A push of batch b on a model s
// versions old, with n live workers and global batch B, takes the step
//   lr * (b / B) * min(1, n / (1 + s)):
// with n workers pushing in turn s is about n - 1, which is not damped; only staler
// pushes are. Asynchrony itself acts like momentum of about 1 - 1/n (Mitliagkas et al.,
// 2016, "Asynchrony begets momentum"), so the explicit momentum per push (SGD's momentum,
// Adam's beta1) is lowered by that much and the total stays near the configured one. Buffers (BatchNorm statistics)
// move toward the push's by its batch share. Adam and AdamW take the push as its share
// b/B of a global batch (sample_share; ParameterStore::Apply's square-root rule), so the
// sync learning rate works in async too.
#ifndef OMNILEARN_SERVER_CONTROL_ASYNC_RULE_H_
#define OMNILEARN_SERVER_CONTROL_ASYNC_RULE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/data/step_settings.h"

namespace omnilearn {
namespace server {

// The ablation's switches (the defaults are the rule above). Without `lr_scaling` every
// push takes the equal share 1/n instead of b/B (batch-proportional steps off); without
// `staleness_damping` no push is damped and the momentum is not lowered: the paper's
// "plain async" baseline when the batches are equal.
struct AsyncRuleOptions {
  bool lr_scaling = true;
  bool staleness_damping = true;
  // Adam/AdamW: the square-root rule for a push's share (off: each push is a full Adam
  // step at lr * lr_scale, what earlier releases did).
  bool adam_sqrt_scaling = true;
  // Adam/AdamW: workers compute on the weights stepped ahead by the other live workers'
  // pushes that will land first (ParameterStore::Predict, PredictedSteps; off: on the
  // weights as they are, and beta1 lowered as staleness_damping says).
  bool adam_weight_prediction = true;
};

// `live` >= 1 (the pushing worker is live), `global_batch` >= 1. `predicted`: the push was
// computed on weights stepped ahead by the steps it meets (Adam's weight prediction,
// PredictedSteps), which takes away the staleness that acts as momentum, so the momentum
// stays as configured (lowered, the job's loss ends higher: docs/results.md).
// The push's step: lr_scale (b / B) * damping, buffer_blend min(1, b / B), each group's
// momentum lowered by momentum_cut = 1 - 1/n (floored at 0; `momentum` is group 0's, which
// the caller passes; none without damping: each group's own), sample_share b / B (1/n
// without lr_scaling; 1 without adam_sqrt_scaling).
StepSettings AsyncStepFor(int64_t batch, int64_t global_batch, size_t live, uint64_t staleness, double momentum,
                          AsyncRuleOptions rule = {}, bool predicted = false);

// Adam/AdamW weight prediction: another live worker as it is seen from a push, the batch
// it trains now and the seconds between its pushes (smoothed; <= 0: not measured yet).
struct PeerPace {
  int64_t batch = 0;
  double push_interval = 0;
};

// How far ahead the pushing worker is given the weights (ParameterStore::Predict), in units
// of the step its push just took (`own`, `own_interval` its own pace): the steps the other
// live workers take before its next push lands. A peer j pushes own_interval / interval_j
// times in that time (once when either is not measured; the ratio kept within 1/8..8),
// each step sized as AsyncStepFor sizes j's batch undamped, lr_scale / sqrt(sample_share)
// (Adam's step under the square-root rule), against `own`'s size. So a fast worker taking
// large steps is not told that a slow one's small steps are its own size, and with equal
// batches a slow worker is given the several steps the fast ones take meanwhile. At most
// kMaxPredictedSteps.
inline constexpr double kMaxPredictedSteps = 1000;
double PredictedSteps(const StepSettings& own, double own_interval, const std::vector<PeerPace>& peers,
                      int64_t global_batch, AsyncRuleOptions rule = {});

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_ASYNC_RULE_H_
