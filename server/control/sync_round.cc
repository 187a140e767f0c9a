#include "server/control/sync_round.h"

namespace omnilearn {
namespace server {

void SyncRound::Open(absl::Time now, absl::Duration timeout, int64_t elements) {
  if (open_) return;
  open_ = true;
  opened_ = now;
  deadline_ = now + timeout;
  sum_.Start(elements);  // kept from round to round: no clearing, no page faults
  samples_ = 0;
}

RoundSum* SyncRound::Reserve(WorkerId id, SampleBatch samples) {
  pushed_.insert(id);
  ++in_flight_;
  sample_ids_.insert(sample_ids_.end(), std::make_move_iterator(samples.begin()),
                     std::make_move_iterator(samples.end()));
  return &sum_;
}

void SyncRound::Accumulate(RoundSum* sum, WorkerId id, double weight, const std::vector<float>& gradient) {
  // In float (vectorized), split across cores, each stripe under its own lock; pushes
  // start at different stripes (by worker id), so they rarely wait for each other.
  sum->Add(gradient, static_cast<float>(weight), RoundSum::RotationFor(id));
}

void SyncRound::Commit(WorkerId id, int64_t batch, double weight) {
  --in_flight_;
  contributions_.emplace_back(id, weight);
  samples_ += batch;
  weight_ += weight;
}

void SyncRound::Add(WorkerId id, int64_t batch, double weight, const std::vector<float>& gradient,
                    SampleBatch samples) {
  Accumulate(Reserve(id, std::move(samples)), id, weight, gradient);
  Commit(id, batch, weight);
}

void SyncRound::Reset() {
  open_ = false;
  sum_.Release();
  in_flight_ = 0;
  samples_ = 0;
  weight_ = 0;
  pushed_.clear();
  sample_ids_.clear();
  batches_.clear();
  contributions_.clear();
}

int64_t SyncRound::batch_for(WorkerId id) const {
  auto it = batches_.find(id);
  return it == batches_.end() ? -1 : it->second;
}

}  // namespace server
}  // namespace omnilearn
