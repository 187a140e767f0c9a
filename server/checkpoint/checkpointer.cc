#include "server/checkpoint/checkpointer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace omnilearn {
namespace server {

Checkpointer::Checkpointer(ParameterServerCore* core, std::unique_ptr<const CheckpointStore> store,
                           absl::Duration every, std::function<void(CheckpointState*)> complete,
                           CheckpointHealth* health)
    : core_(core),
      store_(std::move(store)),
      every_(every),
      complete_(std::move(complete)),
      health_(health),
      last_(core->clock().Now()) {}

absl::StatusOr<std::string> Checkpointer::MaybeCheckpoint() {
  {
    absl::MutexLock lock(&mu_);
    if (core_->clock().Now() - last_ < every_) return std::string();
  }
  return CheckpointNow();
}

absl::StatusOr<std::string> Checkpointer::CheckpointNow() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> written = Write();
  if (health_ != nullptr && !written.ok()) health_->Failed(written.status());
  return written;
}

absl::StatusOr<std::string> Checkpointer::Write() {
  absl::StatusOr<CheckpointState> state = core_->Capture(ParameterServerCore::CaptureFor::kCheckpoint);
  if (!state.ok()) {
    // No model yet: nothing to keep.
    if (state.status().code() == absl::StatusCode::kFailedPrecondition) return std::string();
    return state.status();
  }
  last_ = core_->clock().Now();
  if (state->job != last_job_) {
    absl::StatusOr<std::string> aside = store_->MoveAside(core_->clock().Now());
    if (!aside.ok()) return aside.status();
    last_job_ = state->job;
  }
  if (store_->Has(state->version)) return std::string();
  if (complete_) complete_(&*state);
  absl::StatusOr<std::string> path = store_->Write(*state);
  if (path.ok() && health_ != nullptr) health_->Written(state->version);
  if (path.ok() && written_) written_(*state);
  return path;
}

absl::Status Checkpointer::Keep(const CheckpointState& state) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::string> path = store_->Write(state);
  if (path.ok() && health_ != nullptr) health_->Written(state.version);
  return path.status();
}

absl::StatusOr<uint64_t> Checkpointer::GoBack(const std::vector<std::vector<uint64_t>>& held) {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> common = store_->Versions();  // newest first
  std::string holders = absl::StrCat("the coordinator holds [", absl::StrJoin(common, ", "), "]");
  for (size_t i = 1; i < held.size(); ++i) {
    absl::StrAppend(&holders, ", shard ", i, " [", absl::StrJoin(held[i], ", "), "]");
    common.erase(
        std::remove_if(common.begin(), common.end(),
                       [&](uint64_t v) { return std::find(held[i].begin(), held[i].end(), v) == held[i].end(); }),
        common.end());
  }
  for (uint64_t v : common) {
    absl::StatusOr<CheckpointState> state = store_->Load(v);
    if (absl::IsDataLoss(state.status())) {  // unreadable: the one before
      if (health_ != nullptr) health_->SkippedCorrupt();
      continue;
    }
    if (!state.ok()) return state.status();
    if (absl::Status s = core_->RollBack(*state); !s.ok()) return s;
    if (absl::Status s = store_->DropNewerThan(v); !s.ok()) return s;
    return v;
  }
  return absl::FailedPreconditionError(absl::StrCat("no checkpoint is common to every server (", holders, ")"));
}

}  // namespace server
}  // namespace omnilearn
