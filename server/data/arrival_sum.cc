#include "server/data/arrival_sum.h"

namespace omnilearn {
namespace server {

bool ArrivalSum::Reserve(WorkerId id, uint64_t version, double weight, int64_t elements) {
  if (version_ != version) {
    // A new version's first slice (or the slice's version went back: a restore). The sum's
    // storage is rewritten only when no Add is in flight; otherwise the step sums itself.
    if (!idle()) return false;
    version_ = version;
    closed_ = false;
    summed_.clear();
    sum_.Start(elements);
  }
  if (closed_ || !summed_.emplace(id, weight).second) return false;
  ++in_flight_;
  return true;
}

void ArrivalSum::Add(WorkerId id, absl::Span<const float> slice, double weight) {
  sum_.Add(slice, static_cast<float>(weight), RoundSum::RotationFor(id));
}

const std::vector<float>* ArrivalSum::Close(uint64_t version, const std::vector<ReplicatedStep::Member>& taken) {
  const bool ours = version_ == version && !closed_;
  version_ = version;
  closed_ = true;
  if (!ours || taken.empty() || taken.size() != summed_.size()) return nullptr;
  for (const ReplicatedStep::Member& m : taken) {
    auto it = summed_.find(m.id);
    if (it == summed_.end() || it->second != m.weight || m.model_version != version) return nullptr;
  }
  return &sum_.values();
}

void ArrivalSum::Forget() {
  version_.reset();
  closed_ = false;
  summed_.clear();
}

const std::vector<float>& ArrivalSum::SumOf(const std::vector<std::pair<std::vector<float>, double>>& slices,
                                            int64_t elements) {
  sum_.Start(elements);
  uint64_t rotation = 0;
  for (const auto& [slice, weight] : slices) sum_.Add(slice, static_cast<float>(weight), rotation++);
  return sum_.values();
}

}  // namespace server
}  // namespace omnilearn
