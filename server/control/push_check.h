// The rules a push must pass before it may touch the model or the round, apart from who
// sent it: values in range, a gradient of the model's size, finite values, no version
// from the future. Pure functions of the push and the model's facts; the core calls them
// under its lock and counts what they refuse.
#ifndef OMNILEARN_SERVER_CONTROL_PUSH_CHECK_H_
#define OMNILEARN_SERVER_CONTROL_PUSH_CHECK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/worker_id.h"

namespace omnilearn {
namespace server {

struct PushInfo {
  WorkerId id = 0;
  int64_t batch = 0;
  double compute_seconds = 0;
  uint64_t version = 0;
  double train_loss = 0;
  std::optional<double> test_accuracy;
  bool accuracy_is_validation = false;  // test_accuracy is of validation data, not a test set
  bool out_of_memory = false;
  // The worker's previous iteration from the end of its compute to its reply (0 = none).
  double communication_seconds = 0;
  // Of that, the longest a shard server held its previous push (a sharded job's wait for
  // the other workers' slices; 0 with one server): not the worker's link either.
  double shard_held_seconds = 0;
  // No gradient: the push only reports (test_accuracy measured on `version`, loss);
  // the model and the round are untouched.
  bool report_only = false;
  // No gradient: the worker holds no samples (the job's are all handed out, PushResult::
  // idle). Sync: it is present in the round of `version` and answered when it closes.
  bool idle = false;
  uint64_t emulation_overruns = 0;  // the worker's emulated steps that overran, so far
  // Each param group's rate as the worker's scheduler set it (sent when it changed; empty:
  // unchanged): the job steps at these from now on.
  std::vector<double> group_lr;
  // The caller already checked that every value is finite (the service does it while
  // copying the chunks), so the core need not walk the gradient again.
  bool finite_checked = false;
  // A slice sent again after a transport error (PushHeader.resend): a shard that took this
  // session's slice of `version` already answers applied without taking it twice.
  bool resend = false;
};

// The largest batch a push may claim, and the longest compute or communication time.
inline constexpr int64_t kMaxPushBatch = int64_t{1} << 24;
inline constexpr double kMaxComputeSeconds = 86400;  // a day per mini-batch: beyond it, a broken clock

// What every push reports (a report-only one too): an accuracy in [0, 1], a finite loss.
// InvalidArgument naming the value otherwise.
absl::Status CheckPushReport(const PushInfo& info);

// A push that trains (not report-only): its batch in [1, kMaxPushBatch], a version not
// newer than `model_version`, and unless it reports out of memory, times in range and a
// gradient of `model_elements` finite values (not walked again when the caller checked).
absl::Status CheckPushGradient(const PushInfo& info, const std::vector<float>& gradient, uint64_t model_version,
                               int64_t model_elements);

// A push's model version: not newer than the version it pushes to (`held`: the model's,
// or a shard's slice's). The one version check of both data planes: a version from the
// future is refused at once, never held. InvalidArgument naming both otherwise.
absl::Status CheckPushVersion(uint64_t pushed, uint64_t held);

// A gradient's values: `model_elements` of them (the whole model's, or a shard's slice's),
// all finite unless the caller checked them while copying (`finite_checked`). The one
// gradient check of both data planes. InvalidArgument naming the counts otherwise.
absl::Status CheckGradientValues(const std::vector<float>& gradient, int64_t model_elements, bool finite_checked);

// A call acts for session `id` only with its secret: OK when `secret` is `expected` (the
// session's), compared in constant time; else PermissionDenied. The one secret check of
// both data planes (each finds the session its own way first).
absl::Status CheckSessionSecret(WorkerId id, absl::string_view expected, absl::string_view secret);

// A push trains the batch it was assigned, so that a worker cannot scale its own weight
// in the round or its async step by claiming another: with samples (`uses_samples`),
// their count (`assigned`); without, the batch the server last told it (`assigned`) or
// the plan's batch for it now (`planned`: a re-plan may reach it after its step began).
// InvalidArgument naming both otherwise.
absl::Status CheckAssignedBatch(int64_t claimed, bool uses_samples, int64_t assigned, int64_t planned);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_PUSH_CHECK_H_
