#include "common/clock.h"

namespace omnilearn {
namespace {

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu.AwaitWithDeadline(cond, deadline);
  }
  void SleepFor(absl::Duration d) const override { absl::SleepFor(d); }
};

}  // namespace

const Clock* Clock::Real() {
  static const RealClock* clock = new RealClock();
  return clock;
}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration d) { SleepFor(d); }

void FakeClock::SleepFor(absl::Duration d) const {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

bool FakeClock::AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline) const {
  if (cond.Eval()) return true;
  waiters_.fetch_add(1);
  bool met = false;
  while (true) {
    if (mu.AwaitWithTimeout(cond, absl::Milliseconds(1))) {
      met = true;
      break;
    }
    if (Now() >= deadline) {
      met = cond.Eval();
      break;
    }
  }
  waiters_.fetch_sub(1);
  return met;
}

}  // namespace omnilearn
