#include "worker/client/push_buckets.h"

namespace omnilearn {
namespace worker {

PushBuckets::PushBuckets(const ModelLayout& layout, int64_t bucket_bytes) {
  const int n = static_cast<int>(layout.tensors().size());
  bucket_of_.assign(n, 0);
  int64_t filled = 0;
  for (int i = n - 1; i >= 0; --i) {
    const int64_t bytes = layout.size(i) * static_cast<int64_t>(sizeof(float));
    if (members_.empty() || (filled > 0 && filled + bytes > bucket_bytes)) {
      members_.emplace_back();
      filled = 0;
    }
    members_.back().push_back(i);
    bucket_of_[i] = static_cast<int>(members_.size()) - 1;
    filled += bytes;
  }
  missing_.resize(members_.size());
  for (size_t b = 0; b < members_.size(); ++b) missing_[b] = static_cast<int>(members_[b].size());
  final_.assign(n, false);
}

std::vector<int> PushBuckets::Ready(int tensor) {
  if (tensor < 0 || tensor >= static_cast<int>(final_.size()) || final_[tensor]) return {};
  final_[tensor] = true;
  const int b = bucket_of_[tensor];
  if (--missing_[b] > 0) return {};
  return members_[b];  // whole now, and only now
}

}  // namespace worker
}  // namespace omnilearn
