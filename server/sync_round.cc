#include "server/sync_round.h"

namespace omnilearn {
namespace server {

void SyncRound::Open(absl::Time now, absl::Duration timeout, int64_t elements) {
  if (open_) return;
  open_ = true;
  opened_ = now;
  deadline_ = now + timeout;
  sum_.resize(elements);  // kept from round to round: no clearing, no page faults
  samples_ = 0;
}

void SyncRound::Add(WorkerId id, int64_t batch, double weight, const std::vector<float>& gradient,
                    SampleBatch samples) {
  // In float (vectorized); the first push writes the sum, so it never needs clearing.
  const float b = static_cast<float>(weight);
  float* __restrict sum = sum_.data();
  const float* __restrict g = gradient.data();
  const size_t n = gradient.size();
  if (samples_ == 0) {
    for (size_t i = 0; i < n; ++i) sum[i] = b * g[i];
  } else {
    for (size_t i = 0; i < n; ++i) sum[i] += b * g[i];
  }
  samples_ += batch;
  weight_ += weight;
  pushed_.insert(id);
  sample_ids_.insert(sample_ids_.end(), std::make_move_iterator(samples.begin()), std::make_move_iterator(samples.end()));
}

int64_t SyncRound::batch_for(WorkerId id) const {
  auto it = batches_.find(id);
  return it == batches_.end() ? -1 : it->second;
}

}  // namespace server
}  // namespace omnilearn
