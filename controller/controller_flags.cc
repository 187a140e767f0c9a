#include "controller/controller_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "common/flag_checks.h"

ABSL_FLAG(std::string, controller, "omnilearn", "omnilearn | paper | off (equal static batches)");
ABSL_FLAG(std::string, balance, "iteration",
          "what the omnilearn controller makes equal across workers: iteration (compute + each worker's link "
          "time, so a worker behind a slow link gets a smaller batch) | compute (compute only, as the paper)");
ABSL_FLAG(int64_t, global_batch, 256, "sum of all workers' mini-batches");
ABSL_FLAG(int64_t, min_batch, 1, "smallest per-worker batch");
ABSL_FLAG(int64_t, max_batch, 0, "largest per-worker batch (0 = global batch)");
ABSL_FLAG(int, adjust_every, 10, "iterations between controller adjustments (with local steps: every round)");
ABSL_FLAG(double, deadband, 0.05, "omnilearn: minimum predicted spread excess before re-planning");
ABSL_FLAG(bool, revert_worse_plans, true,
          "omnilearn: go back to the plan before when a new plan's first rounds deliver less and the workers' "
          "times are what they were before the change (the change came from noise)");

ABSL_FLAG(bool, step_filter, true,
          "learn from a worker's steps except a warm-up first step, an emulated device's overrun and a step "
          "slower than twice its recent ones (false: every step, as before; an ablation)");

namespace omnilearn {
namespace controller {

absl::StatusOr<ControllerFlags> ControllerFromFlags() {
  auto d = [](auto v) { return static_cast<double>(v); };
  if (absl::Status s = CheckFlagRanges({
          {"global_batch", d(absl::GetFlag(FLAGS_global_batch)), 1, 1 << 24},
          {"min_batch", d(absl::GetFlag(FLAGS_min_batch)), 1, 1 << 24},
          {"max_batch", d(absl::GetFlag(FLAGS_max_batch)), 0, 1 << 24},
          {"adjust_every", d(absl::GetFlag(FLAGS_adjust_every)), 1, 1e6},
          {"deadband", absl::GetFlag(FLAGS_deadband), 0, 10},
      });
      !s.ok()) {
    return s;
  }
  absl::StatusOr<Policy> policy = ParsePolicy(absl::GetFlag(FLAGS_controller));
  if (!policy.ok()) return policy.status();
  absl::StatusOr<Balance> balance = ParseBalance(absl::GetFlag(FLAGS_balance));
  if (!balance.ok()) return balance.status();
  ControllerFlags f;
  f.options.policy = *policy;
  f.options.balance = *balance;
  f.options.global_batch = absl::GetFlag(FLAGS_global_batch);
  f.options.min_batch = absl::GetFlag(FLAGS_min_batch);
  f.options.max_batch = absl::GetFlag(FLAGS_max_batch);
  f.options.deadband = absl::GetFlag(FLAGS_deadband);
  f.options.revert_worse_plans = absl::GetFlag(FLAGS_revert_worse_plans);
  if (!absl::GetFlag(FLAGS_step_filter)) f.options.steps = StepFilterOptions::Off();
  f.adjust_every = absl::GetFlag(FLAGS_adjust_every);
  return f;
}

}  // namespace controller
}  // namespace omnilearn
