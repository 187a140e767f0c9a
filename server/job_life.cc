#include "server/job_life.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace omnilearn {
namespace server {

bool JobLife::MaybeFinish(bool all_left) {
  if (finished_ || !any_completed_ || !all_left) return false;
  finished_ = true;
  return true;
}

absl::Status JobLife::CheckJoinable(bool reset_when_done, uint64_t version, uint64_t samples) const {
  if (!finished_ || reset_when_done) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "the job on this server is finished (model version %d, %d samples trained): start a new server, or run "
      "it with --reset_when_done to take a new job",
      version, samples));
}

void JobLife::Next(absl::Time now) {
  ++number_;
  expected_ = num_workers_;
  start_by_ = now + start_timeout_;
  started_ = any_completed_ = finished_ = false;
}

void JobLife::Regather(absl::Time now, int live, absl::Duration timeout) {
  if (!started_) return;  // the barrier waiting already (a restart, a rollback before all were back) stays
  expected_ = std::max(1, live);
  start_by_ = now + timeout;
  started_ = false;
}

}  // namespace server
}  // namespace omnilearn
