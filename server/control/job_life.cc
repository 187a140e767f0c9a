#include "server/control/job_life.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace omnilearn {
namespace server {

bool JobLife::MaybeFinish(bool all_left) {
  if (finished_ || !any_completed_ || !all_left) return false;
  finished_ = true;
  return true;
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
