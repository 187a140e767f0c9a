#include "server/rpc/ordered_apply.h"

#include <utility>

namespace omnilearn {
namespace server {

OrderedApply::OrderedApply(ShardApplier* applier, std::function<void()> on_error)
    : applier_(applier), on_error_(std::move(on_error)), thread_([this] { Loop(); }) {}

OrderedApply::~OrderedApply() { (void)Finish(); }

bool OrderedApply::Add(v1::ShardCommand command) {
  const int64_t bytes = static_cast<int64_t>(command.ByteSizeLong());
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !status_.ok() || queue_.empty() || queued_bytes_ < kMaxQueuedBytes;
  };
  mu_.Await(absl::Condition(&room));
  if (!status_.ok()) return false;
  if (ShardApplier::IsOpening(command) && barriers_ == 0) {
    // No init ahead: let the session in now; applied again in its place.
    if (absl::Status s = applier_->OpenAhead(command); !s.ok()) {
      status_ = s;  // as Apply would fail it in its place
      return false;
    }
  }
  if (!ShardApplier::MayBePassed(command)) ++barriers_;
  queued_bytes_ += bytes;
  queue_.push_back(std::move(command));
  return true;
}

void OrderedApply::Loop() {
  while (true) {
    v1::ShardCommand c;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closed_; };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty() || !status_.ok()) return;
      c = std::move(queue_.front());
      queue_.pop_front();
    }
    const absl::Status s = applier_->Apply(c);
    bool failed = false;
    {
      absl::MutexLock lock(&mu_);
      queued_bytes_ -= static_cast<int64_t>(c.ByteSizeLong());
      if (!ShardApplier::MayBePassed(c)) --barriers_;
      if (!s.ok() && status_.ok()) {
        status_ = s;
        failed = true;
      }
    }
    if (failed) {
      if (on_error_) on_error_();
      return;
    }
  }
}

absl::Status OrderedApply::Finish() {
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  return status_;
}

}  // namespace server
}  // namespace omnilearn
