// A shard's sync step sum, built as the members' slices arrive rather than when the
// coordinator's command comes (issue 50, item 1): each push adds its slice, weighted by
// its batch (the coordinator's weighted mean), to the sum of its model version, outside
// the shard's lock and beside other pushes (RoundSum's stripes). The step uses that sum
// when it takes exactly the slices summed, with the weights summed; otherwise (a member
// left out, --aggregation=mean's weights) the step sums the slices it took itself.
#ifndef OMNILEARN_SERVER_DATA_ARRIVAL_SUM_H_
#define OMNILEARN_SERVER_DATA_ARRIVAL_SUM_H_

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "common/worker_id.h"
#include "server/data/replicated_step.h"
#include "server/data/round_sum.h"

namespace omnilearn {
namespace server {

// Add runs outside the owner's lock, beside other Adds; every other method needs the
// owner's lock, and Close and SumOf need idle() (no Add between Reserve and Done).
class ArrivalSum {
 public:
  // Whether the caller adds `id`'s slice of `version` (then Add and Done): false when the
  // sum of `version` was closed (its step took its slices) or holds `id` already (a resent
  // slice). The sum of another version starts empty at its first slice (when idle).
  bool Reserve(WorkerId id, uint64_t version, double weight, int64_t elements);
  // sum += weight * slice, with the weight Reserve was given.
  void Add(WorkerId id, absl::Span<const float> slice, double weight);
  void Done() { --in_flight_; }
  bool idle() const { return in_flight_ == 0; }
  // Closes the sum of `version`: later slices of it are not added. Returns it when it is
  // exactly the slices of `taken` (ids, versions and weights), nullptr otherwise.
  const std::vector<float>* Close(uint64_t version, const std::vector<ReplicatedStep::Member>& taken);
  // Nothing summed so far counts (the slice's values were replaced: a restore may bring back
  // the version being summed). An Add in flight finishes into storage the next version's
  // first Reserve rewrites only once idle.
  void Forget();
  // The sum of `slices` (each with its weight), in place of the arrivals' (after Close).
  const std::vector<float>& SumOf(const std::vector<std::pair<std::vector<float>, double>>& slices, int64_t elements);

 private:
  RoundSum sum_;
  std::optional<uint64_t> version_;  // the version summed (or closed)
  bool closed_ = false;
  std::map<WorkerId, double> summed_;  // id -> weight, reserved or added
  int in_flight_ = 0;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_ARRIVAL_SUM_H_
