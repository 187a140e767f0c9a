// Test aid: waits for a state another thread reaches, bounded, instead of sleeping and
// hoping. The bound is generous (a loaded machine may be slow) and only ever reached
// when the state never comes, which fails the test with the caller's description.
#ifndef OMNILEARN_COMMON_AWAIT_STATE_H_
#define OMNILEARN_COMMON_AWAIT_STATE_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace omnilearn {

// True as soon as `pred()` holds; false when it still does not after `bound` (real time).
template <typename Pred>
bool AwaitState(Pred pred, absl::Duration bound = absl::Seconds(60)) {
  const absl::Time until = absl::Now() + bound;
  while (!pred()) {
    if (absl::Now() >= until) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_AWAIT_STATE_H_
