#include "server/sync_round.h"

#include "common/parallel_for.h"

namespace omnilearn {
namespace server {
namespace {

// sum (+)= b * g over [lo, hi). A free function with restrict parameters, so that GCC
// vectorizes it.
void Accumulate(float* __restrict sum, const float* __restrict g, int64_t lo, int64_t hi, float b, bool first) {
  if (first) {
    for (int64_t i = lo; i < hi; ++i) sum[i] = b * g[i];
  } else {
    for (int64_t i = lo; i < hi; ++i) sum[i] += b * g[i];
  }
}

}  // namespace

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
  // Split across cores (ParallelFor), 1 MiB ranges at least.
  const float b = static_cast<float>(weight);
  const bool first = samples_ == 0;
  ParallelFor(static_cast<int64_t>(gradient.size()), 1 << 18, [&](int64_t begin, int64_t end) {
    Accumulate(sum_.data(), gradient.data(), begin, end, b, first);
  });
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
