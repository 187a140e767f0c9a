// One optimizer step's settings, written once: the core decides them (sync: the round's
// weighted mean; async: the staleness rule, control/async_rule.h), the store applies them
// (ParameterStore::Apply), and a sharded job's shards replay them (ReplicatedStep).
#ifndef OMNILEARN_SERVER_DATA_STEP_SETTINGS_H_
#define OMNILEARN_SERVER_DATA_STEP_SETTINGS_H_

#include <optional>
#include <vector>

namespace omnilearn {
namespace server {

struct StepSettings {
  // The step's rate is the store's (its schedule, each group's) times lr_scale. A push of
  // lr_scale = b/B moves an SGD model by its share of one global-batch step.
  double lr_scale = 1;
  // The step's rate itself, when it was decided elsewhere: a shard replays the rate its
  // coordinator's step took (schedule, group and lr_scale applied), whatever its own store's
  // schedule. None: the store's rate times lr_scale.
  std::optional<double> learning_rate;
  // Each param group's rate, decided as learning_rate is (a shard's replay of a job with several
  // groups); empty: learning_rate (or the store's) for every group.
  std::vector<double> group_rates;
  // Buffer tensors (BatchNorm statistics) move toward the update's values: b += blend * (u - b).
  double buffer_blend = 1;
  // SGD's momentum or Adam's beta1 for this step, every group's; none: each group's own.
  std::optional<double> momentum;
  // > 0: each group's own momentum (OptimizerRule::momentum) lowered by this much, floored
  // at 0 (async's staleness damping); `momentum` is then group 0's, for a shard of an
  // earlier release, and the store reads this instead.
  double momentum_cut = 0;
  // The update is taken times this (a round's sum of b_k g_k times 1 / sum b_k is its mean).
  double update_scale = 1;
  // The part of a global batch the step stands for: 1 in sync, b/B for an async push (Adam's
  // square-root rule, ParameterStore::Apply).
  double sample_share = 1;
  // With clip_grad_norm: the squared norm to clip by when the caller has it (a shard's slice:
  // the whole model's, reduced with the other slices); none: the store takes its update's own.
  std::optional<double> norm_squared;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_STEP_SETTINGS_H_
