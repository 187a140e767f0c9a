// The server's side of data parallelism: one permutation of the training set per epoch,
// handed out in consecutive pieces, so that across all workers (whatever their batch
// sizes) every epoch visits every sample exactly once. Pieces that were assigned but not
// trained (a push left out, a worker gone) are put back and handed out first. A job that
// says how many samples it trains in all (its epochs) gets no sample past them: its last
// pieces are short or empty, and the job ends on the exact count.
#ifndef OMNILEARN_SERVER_CONTROL_EPOCH_SAMPLER_H_
#define OMNILEARN_SERVER_CONTROL_EPOCH_SAMPLER_H_

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/sample_span.h"

namespace omnilearn {
namespace server {

// What a checkpoint keeps; `pending` are (epoch, id) pairs still to be trained before
// the permutation goes on at (epoch, cursor).
struct SamplerState {
  uint64_t dataset_size = 0;
  uint64_t seed = 1;
  uint64_t epoch = 0;
  uint64_t cursor = 0;
  std::vector<std::pair<uint64_t, uint64_t>> pending;
};

// Thread-compatible.
class EpochSampler {
 public:
  explicit EpochSampler(uint64_t seed) : seed_(seed) {}

  // The first call fixes the training set's size; later ones must agree.
  // InvalidArgument for 0 or for another size than the job's.
  absl::Status SetDatasetSize(uint64_t n);
  uint64_t dataset_size() const { return n_; }
  bool enabled() const { return n_ > 0; }
  // The samples the job trains in all, counted from the first epoch's start (0: no end;
  // the workers stop by themselves). The first non-zero call fixes it; InvalidArgument
  // for another one later (join_check.h's CheckJoinJobSamples says it to the worker).
  absl::Status SetJobSamples(uint64_t total);
  uint64_t job_samples() const { return job_samples_; }
  // Every sample of the job was handed out and none was put back: Take returns nothing.
  bool exhausted() const;

  // The next k samples: those put back first, then the permutation (across an epoch
  // boundary when it ends), never past the job's samples. Empty while not enabled.
  SampleBatch Take(int64_t k);
  // Puts samples that were not trained back in front, in their order.
  void Return(const SampleBatch& batch);

  // The state, with `outstanding` (assigned, not trained) counted as pending.
  SamplerState State(const std::vector<const SampleBatch*>& outstanding) const;
  // InvalidArgument for a state that cannot be real (ids or cursor out of range).
  absl::Status Restore(const SamplerState& state);

  // Epoch `epoch`'s order of [0, n): a Fisher-Yates shuffle driven by a 64-bit
  // Mersenne twister seeded from (seed, epoch); the same on every platform.
  static std::vector<uint64_t> Permutation(uint64_t n, uint64_t seed, uint64_t epoch);

 private:
  void EnsurePermutation();

  uint64_t seed_;
  uint64_t n_ = 0;
  uint64_t epoch_ = 0;
  uint64_t cursor_ = 0;
  uint64_t job_samples_ = 0;     // 0: no end
  std::vector<uint64_t> order_;  // epoch_'s permutation (built lazily)
  uint64_t order_epoch_ = ~0ull;
  std::deque<std::pair<uint64_t, uint64_t>> pending_;  // (epoch, id)
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_EPOCH_SAMPLER_H_
