// Time, injected: the server core, its leases, round deadlines, start timeout and the
// checkpoint timer read a Clock, so tests drive time instead of sleeping (leveldb's
// Env::NowMicros is the model). Debian's Abseil has no clock interface of its own.
#ifndef OMNILEARN_COMMON_CLOCK_H_
#define OMNILEARN_COMMON_CLOCK_H_

#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace omnilearn {

// Implementations are thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // With `mu` held: waits until `cond` holds or Now() >= deadline, releasing `mu` while
  // it waits (absl::Mutex::AwaitWithDeadline in this clock's time). Returns cond's value.
  virtual bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
  // Blocks the calling thread for `d` of this clock's time.
  virtual void SleepFor(absl::Duration d) const = 0;

  // The process-wide real clock (never null, never destroyed).
  static const Clock* Real();
};

// A clock that moves only when told. Waiters see the new time within a millisecond of
// real time (they poll it), so a test advances the clock and then waits on the state
// that must follow, never on the wall clock.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1000000000)) : now_(start) {}
  absl::Time Now() const override;
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Moves the clock on by `d` at once: a sleeper's time passes without waiting.
  void SleepFor(absl::Duration d) const override;
  void Advance(absl::Duration d);
  // Calls in AwaitWithDeadline whose condition did not hold when they came: a test waits
  // for a call to be waiting before it acts.
  int waiters() const { return waiters_.load(); }

 private:
  mutable std::atomic<int> waiters_{0};
  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_CLOCK_H_
