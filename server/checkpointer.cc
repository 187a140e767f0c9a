#include "server/checkpointer.h"

namespace omnilearn {
namespace server {

Checkpointer::Checkpointer(ParameterServerCore* core, CheckpointDir dir, absl::Duration every)
    : core_(core), dir_(std::move(dir)), every_(every), last_(core->clock().Now()), last_version_(core->version()) {}

absl::StatusOr<std::string> Checkpointer::MaybeCheckpoint() {
  if (core_->clock().Now() - last_ < every_) return std::string();
  return CheckpointNow();
}

absl::StatusOr<std::string> Checkpointer::CheckpointNow() {
  absl::StatusOr<CheckpointState> state = core_->Capture(ParameterServerCore::CaptureFor::kCheckpoint);
  if (!state.ok()) {
    // No model yet: nothing to keep.
    if (state.status().code() == absl::StatusCode::kFailedPrecondition) return std::string();
    return state.status();
  }
  last_ = core_->clock().Now();
  if (state->job != last_job_) {
    absl::StatusOr<std::string> aside = dir_.MoveAside(core_->clock().Now());
    if (!aside.ok()) return aside.status();
    last_job_ = state->job;
    last_version_ = ~0ull;
  }
  if (state->version == last_version_) return std::string();
  absl::StatusOr<std::string> path = dir_.Write(*state);
  if (path.ok()) last_version_ = state->version;
  return path;
}

}  // namespace server
}  // namespace omnilearn
