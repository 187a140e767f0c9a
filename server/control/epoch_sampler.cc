#include "server/control/epoch_sampler.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace server {
namespace {

// Appends (epoch, id) to the batch, starting a new span when the epoch changes.
void Append(SampleBatch& batch, uint64_t epoch, uint64_t id) {
  if (batch.empty() || batch.back().epoch != epoch) batch.push_back(SampleSpan{epoch, {}});
  batch.back().ids.push_back(id);
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<uint64_t> EpochSampler::Permutation(uint64_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(SplitMix64(seed) ^ SplitMix64(epoch + 1));
  for (uint64_t i = n; i > 1; --i) {
    const uint64_t j = rng() % i;  // the bias for n << 2^64 is negligible; the order is what matters
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

absl::Status EpochSampler::SetDatasetSize(uint64_t n) {
  if (n == 0) return absl::InvalidArgumentError("the training set is empty");
  if (n_ != 0 && n_ != n) {
    return absl::InvalidArgumentError(absl::StrCat("this worker's training set has ", n, " samples, the job's has ", n_,
                                                   ": every worker of a job must train on the same data set"));
  }
  n_ = n;
  return absl::OkStatus();
}

absl::Status EpochSampler::SetJobSamples(uint64_t total) {
  if (total == 0 || total == job_samples_) return absl::OkStatus();
  if (job_samples_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the job trains ", job_samples_, " samples, not ", total));
  }
  job_samples_ = total;
  return absl::OkStatus();
}

bool EpochSampler::exhausted() const {
  return job_samples_ > 0 && pending_.empty() && epoch_ * n_ + cursor_ >= job_samples_;
}

void EpochSampler::EnsurePermutation() {
  if (order_epoch_ == epoch_) return;
  order_ = Permutation(n_, seed_, epoch_);
  order_epoch_ = epoch_;
}

SampleBatch EpochSampler::Take(int64_t k) {
  SampleBatch batch;
  if (!enabled()) return batch;
  for (; k > 0 && !pending_.empty(); --k) {
    Append(batch, pending_.front().first, pending_.front().second);
    pending_.pop_front();
  }
  for (; k > 0 && !exhausted(); --k) {
    if (cursor_ == n_) {
      ++epoch_;
      cursor_ = 0;
    }
    EnsurePermutation();
    Append(batch, epoch_, order_[cursor_++]);
  }
  return batch;
}

void EpochSampler::Return(const SampleBatch& batch) {
  for (auto span = batch.rbegin(); span != batch.rend(); ++span) {
    for (auto id = span->ids.rbegin(); id != span->ids.rend(); ++id) pending_.emplace_front(span->epoch, *id);
  }
}

SamplerState EpochSampler::State(const std::vector<const SampleBatch*>& outstanding) const {
  SamplerState s;
  s.dataset_size = n_;
  s.seed = seed_;
  s.epoch = epoch_;
  s.cursor = cursor_;
  for (const SampleBatch* b : outstanding) {
    for (const SampleSpan& span : *b) {
      for (uint64_t id : span.ids) s.pending.emplace_back(span.epoch, id);
    }
  }
  s.pending.insert(s.pending.end(), pending_.begin(), pending_.end());
  return s;
}

absl::Status EpochSampler::Restore(const SamplerState& s) {
  if (s.dataset_size == 0) {
    *this = EpochSampler(s.seed);
    return absl::OkStatus();
  }
  if (s.cursor > s.dataset_size) return absl::InvalidArgumentError("sampler: cursor beyond the data set");
  for (const auto& [epoch, id] : s.pending) {
    if (id >= s.dataset_size || epoch > s.epoch)
      return absl::InvalidArgumentError("sampler: pending sample out of range");
  }
  seed_ = s.seed;
  n_ = s.dataset_size;
  epoch_ = s.epoch;
  cursor_ = s.cursor;
  order_epoch_ = ~0ull;
  order_.clear();
  pending_.assign(s.pending.begin(), s.pending.end());
  return absl::OkStatus();
}

}  // namespace server
}  // namespace omnilearn
