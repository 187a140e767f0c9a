// The sync round's running sum of b_k * g_k, which several pushes add to at once: the
// sum is cut into stripes (1 MiB of floats each), every stripe summed under a lock of
// its own, so two pushes proceed side by side on different stripes and the core's
// mutex is not held while the model-sized loop runs.
#ifndef OMNILEARN_SERVER_DATA_ROUND_SUM_H_
#define OMNILEARN_SERVER_DATA_ROUND_SUM_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace omnilearn {
namespace server {

// Add is thread-safe; Start, values and Release need that no Add runs (the round's
// in-flight count guarantees it to the core).
class RoundSum {
 public:
  static constexpr int64_t kStripeElements = int64_t{1} << 18;

  // An empty sum of `elements` values. The storage is kept from round to round: nothing
  // is cleared (each stripe's first Add writes instead of adding) and nothing faults in.
  void Start(int64_t elements);
  // sum += weight * values, values.size() == the Start'ed size. Concurrent callers
  // each begin at the stripe `rotation` picks, so they rarely wait on each other; the
  // stripes of one call are split across cores. Per stripe, the arithmetic is that of
  // adding the calls one after another in the order they took its lock.
  void Add(absl::Span<const float> values, float weight, uint64_t rotation);
  const std::vector<float>& values() const { return sum_; }
  // The rotation of pusher `id`'s Add: concurrent pushers begin at different stripes.
  static uint64_t RotationFor(uint64_t id) { return id * 7919; }
  // Frees the storage (a new job).
  void Release();

 private:
  struct Stripe {
    absl::Mutex mu;
    bool written ABSL_GUARDED_BY(mu) = false;  // this round has written the stripe
  };
  int64_t Stripes() const { return (static_cast<int64_t>(sum_.size()) + kStripeElements - 1) / kStripeElements; }

  std::vector<float> sum_;
  std::unique_ptr<Stripe[]> stripes_;
  int64_t allocated_stripes_ = 0;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_ROUND_SUM_H_
