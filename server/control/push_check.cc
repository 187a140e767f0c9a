#include "server/control/push_check.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/constant_time.h"
#include "common/tensor_codec.h"

namespace omnilearn {
namespace server {

absl::Status CheckPushReport(const PushInfo& info) {
  if (info.test_accuracy && !(*info.test_accuracy >= 0 && *info.test_accuracy <= 1)) {
    return absl::InvalidArgumentError("test accuracy must be in [0, 1]");
  }
  if (!std::isfinite(info.train_loss)) {
    return absl::InvalidArgumentError(absl::StrCat("train loss must be finite, got ", info.train_loss));
  }
  return absl::OkStatus();
}

absl::Status CheckPushGradient(const PushInfo& info, const std::vector<float>& gradient, uint64_t model_version,
                               int64_t model_elements) {
  if (info.batch < 1 || info.batch > kMaxPushBatch) {
    return absl::InvalidArgumentError(absl::StrCat("batch size ", info.batch, " out of range"));
  }
  if (absl::Status s = CheckPushVersion(info.version, model_version); !s.ok()) return s;
  if (info.out_of_memory) return absl::OkStatus();  // no gradient, no times
  if (!std::isfinite(info.compute_seconds) || info.compute_seconds <= 0 || info.compute_seconds > kMaxComputeSeconds) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute seconds must be in (0, ", kMaxComputeSeconds, "], got ", info.compute_seconds));
  }
  if (!(info.communication_seconds >= 0 && info.communication_seconds <= kMaxComputeSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat("communication seconds must be in [0, ", kMaxComputeSeconds,
                                                   "], got ", info.communication_seconds));
  }
  if (!(info.shard_held_seconds >= 0 && info.shard_held_seconds <= kMaxComputeSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard held seconds must be in [0, ", kMaxComputeSeconds, "], got ", info.shard_held_seconds));
  }
  return CheckGradientValues(gradient, model_elements, info.finite_checked);
}

absl::Status CheckSessionSecret(WorkerId id, absl::string_view expected, absl::string_view secret) {
  if (ConstantTimeEquals(secret, expected)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat("the call does not carry worker ", id,
                                                  "'s session secret: only the process that joined as ", id,
                                                  " can act for it"));
}

absl::Status CheckPushVersion(uint64_t pushed, uint64_t held) {
  if (pushed <= held) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("model version ", pushed, " is newer than the server's ", held));
}

absl::Status CheckGradientValues(const std::vector<float>& gradient, int64_t model_elements, bool finite_checked) {
  if (static_cast<int64_t>(gradient.size()) != model_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient has ", gradient.size(), " values, the model has ", model_elements));
  }
  if (!finite_checked && !AllFinite(gradient)) {
    return absl::InvalidArgumentError("gradient contains NaN or Inf: not applied");
  }
  return absl::OkStatus();
}

absl::Status CheckAssignedBatch(int64_t claimed, bool uses_samples, int64_t assigned, int64_t planned) {
  if (claimed == assigned || (!uses_samples && claimed == planned)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the push claims a batch of ", claimed, " samples; the server assigned ", assigned));
}

}  // namespace server
}  // namespace omnilearn
