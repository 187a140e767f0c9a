#include "server/rpc/admission.h"

#include <algorithm>
#include <utility>

namespace omnilearn {
namespace server {

bool Admission::BeginUpload(WorkerId id, bool resend) {
  absl::MutexLock lock(&mu_);
  return (resend ? resending_ : uploading_).insert(id).second;
}

void Admission::EndUpload(WorkerId id, bool resend) {
  absl::MutexLock lock(&mu_);
  (resend ? resending_ : uploading_).erase(id);
}

bool Admission::UploadInFlight(WorkerId id) const {
  absl::MutexLock lock(&mu_);
  return uploading_.count(id) > 0 || resending_.count(id) > 0;
}

bool Admission::BeginJoinUpload(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto turn = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return join_uploads_ < limits_.max_join_uploads; };
  if (!clock_->AwaitWithDeadline(mu_, absl::Condition(&turn), deadline)) return false;
  ++join_uploads_;
  return true;
}

void Admission::EndJoinUpload() {
  absl::MutexLock lock(&mu_);
  --join_uploads_;
}

Admission::StreamId Admission::Watch(std::function<void()> cancel) {
  absl::MutexLock lock(&mu_);
  const StreamId id = next_stream_++;
  watched_[id] = Watched{clock_->Now() + limits_.stream_idle_timeout, std::move(cancel)};
  return id;
}

void Admission::Touch(StreamId stream) {
  absl::MutexLock lock(&mu_);
  auto it = watched_.find(stream);
  // A cancelled stream (deadline at infinity) stays cancelled.
  if (it != watched_.end() && it->second.deadline != absl::InfiniteFuture()) {
    it->second.deadline = clock_->Now() + limits_.stream_idle_timeout;
  }
}

void Admission::Unwatch(StreamId stream) {
  absl::MutexLock lock(&mu_);
  watched_.erase(stream);
}

size_t Admission::watched() const {
  absl::MutexLock lock(&mu_);
  return watched_.size();
}

void Admission::CancelIdleStreamsUntilStopped() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = clock_->Now();
    // A stream watched or touched while this waits gets a deadline at or after `next`:
    // waking at the earliest deadline known now misses none.
    absl::Time next = now + limits_.stream_idle_timeout;
    for (auto& [id, w] : watched_) {
      if (w.deadline <= now) {
        w.cancel();  // the handler's next Read fails; it returns and unwatches
        w.deadline = absl::InfiniteFuture();
      } else {
        next = std::min(next, w.deadline);
      }
    }
    clock_->AwaitWithDeadline(mu_, absl::Condition(&stopping_), next);
  }
}

void Admission::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

}  // namespace server
}  // namespace omnilearn
