// Which tensors of a gradient may leave while backward still runs. Backward finishes the
// layers roughly in reverse, so the layout's tensors are cut, last first, into buckets of
// about `bucket_bytes` (a larger tensor is a bucket of its own); a bucket leaves whole once
// all its tensors are final, so the wire carries a few large writes rather than many
// small ones. Torch- and gRPC-free. Thread-compatible.
#ifndef OMNILEARN_WORKER_CLIENT_PUSH_BUCKETS_H_
#define OMNILEARN_WORKER_CLIENT_PUSH_BUCKETS_H_

#include <cstdint>
#include <vector>

#include "common/model_layout.h"

namespace omnilearn {
namespace worker {

class PushBuckets {
 public:
  // One push's buckets: nothing final yet.
  PushBuckets(const ModelLayout& layout, int64_t bucket_bytes);

  // Tensor `tensor` (layout index) is final. Returns the tensors of the bucket this
  // completes, last first (empty when none; repeated calls are harmless), so each tensor
  // is returned at most once. What never becomes final (a parameter without a gradient,
  // the buffers) is the stream's to send at the end (PushStream::Finish).
  std::vector<int> Ready(int tensor);

  int buckets() const { return static_cast<int>(members_.size()); }
  int bucket_of(int tensor) const { return bucket_of_[tensor]; }

 private:
  std::vector<std::vector<int>> members_;  // per bucket: its tensors, last first
  std::vector<int> bucket_of_;             // per tensor
  std::vector<int> missing_;               // per bucket: tensors not final yet
  std::vector<bool> final_;                // per tensor
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_PUSH_BUCKETS_H_
