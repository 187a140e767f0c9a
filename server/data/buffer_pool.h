// Model-sized float buffers reused across pushes: a push is assembled into one taken
// from here and gives it back when the core is done with it, so a push costs no
// allocation and no page faults once the pool holds the peak number of pushes in flight.
#ifndef OMNILEARN_SERVER_DATA_BUFFER_POOL_H_
#define OMNILEARN_SERVER_DATA_BUFFER_POOL_H_

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace omnilearn {
namespace server {

// Thread-safe; its own lock is taken alone (never while calling out).
class BufferPool {
 public:
  explicit BufferPool(size_t max_buffers = 64) : max_buffers_(max_buffers) {}

  // A buffer given back earlier (its size and contents are whatever they were), or an
  // empty one when none is pooled.
  std::vector<float> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `buffer` for a later Take, unless it holds no memory or the pool is full
  // (then it is freed).
  void Return(std::vector<float> buffer) ABSL_LOCKS_EXCLUDED(mu_);
  size_t pooled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t max_buffers_;
  mutable absl::Mutex mu_;
  std::vector<std::vector<float>> buffers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_BUFFER_POOL_H_
