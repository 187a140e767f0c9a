// One synchronous round's state, apart from membership: who pushed, the running sum of
// b_k * g_k (float, reused from round to round without clearing), the samples in it,
// its clock, and the plan its members are told once it closed. Thread-compatible: the
// core calls it under its mutex, except Accumulate, which pushes call side by side
// without it (between Reserve and Commit, while the round counts them in flight).
#ifndef OMNILEARN_SERVER_CONTROL_SYNC_ROUND_H_
#define OMNILEARN_SERVER_CONTROL_SYNC_ROUND_H_

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "absl/time/time.h"
#include "common/worker_id.h"
#include "server/control/epoch_sampler.h"
#include "server/data/round_sum.h"

namespace omnilearn {
namespace server {

class SyncRound {
 public:
  bool open() const { return open_; }
  absl::Time opened() const { return opened_; }
  absl::Time deadline() const { return deadline_; }
  // Opens the round at `now` (the first push starts its clock) for a model of
  // `elements` values. No-op when it is open.
  void Open(absl::Time now, absl::Duration timeout, int64_t elements);

  bool Pushed(WorkerId id) const { return pushed_.count(id) > 0; }
  // The worker is present without contributing (an out-of-memory report).
  void MarkPresent(WorkerId id) { pushed_.insert(id); }
  // A push in three steps, so that the model-sized loop runs without the core's lock:
  // Reserve marks the worker pushed and the push in flight (the round must be open), takes
  // the push's samples (trained when the round closes: a checkpoint meanwhile hands them
  // out again) and returns where to add; Accumulate adds weight * gradient there
  // (thread-safe, no lock needed; several pushes at once); Commit counts the batch. `weight` is what the push counts
  // for in the mean: its batch (weighted aggregation) or 1 (a plain mean over pushes, --aggregation=mean).
  RoundSum* Reserve(WorkerId id, SampleBatch samples);
  static void Accumulate(RoundSum* sum, WorkerId id, double weight, const std::vector<float>& gradient);
  void Commit(WorkerId id, int64_t batch, double weight);
  // The three steps at once (a caller that keeps the lock).
  void Add(WorkerId id, int64_t batch, double weight, const std::vector<float>& gradient, SampleBatch samples);
  // No push between Reserve and Commit: the round may close (and the sum be read).
  bool idle() const { return in_flight_ == 0; }
  // A worker that left: it is no longer awaited (a contribution already summed stays).
  void Forget(WorkerId id) { pushed_.erase(id); }

  // The committed pushes' batches summed (counted as trained by the core already).
  int64_t samples() const { return samples_; }
  // The pushes' weights summed: the round's mean is sum() / weight().
  double weight() const { return weight_; }
  // sum(b_k * g_k); valid while samples() > 0 and idle().
  const std::vector<float>& sum() const { return sum_.values(); }
  // Who is in the sum, with the weight each counts for (a member that left since included).
  const std::vector<std::pair<WorkerId, double>>& contributions() const { return contributions_; }
  // Samples of the pushes in the round, those still adding included (not trained until it
  // closes).
  const SampleBatch& sample_ids() const { return sample_ids_; }

  // Closes the round (it must be idle): `plan` gives each member's next batch, which batch_for() then
  // tells them. The sum's storage is kept for the next round.
  template <typename Plan>
  void Close(Plan plan) {
    batches_.clear();
    for (WorkerId id : pushed_) batches_[id] = plan(id);
    pushed_.clear();
    open_ = false;
    samples_ = 0;
    weight_ = 0;
    sample_ids_.clear();
    contributions_.clear();
  }
  // The batch the closed round planned for `id`, or -1.
  int64_t batch_for(WorkerId id) const;

  // Forgets everything, the sum's storage included (a new job). It must be idle.
  void Reset();

 private:
  bool open_ = false;
  absl::Time opened_, deadline_;
  RoundSum sum_;
  int in_flight_ = 0;  // pushes between Reserve and Commit
  int64_t samples_ = 0;
  double weight_ = 0;
  std::set<WorkerId> pushed_;
  SampleBatch sample_ids_;
  std::vector<std::pair<WorkerId, double>> contributions_;
  std::map<WorkerId, int64_t> batches_;  // the last closed round's plan
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_SYNC_ROUND_H_
