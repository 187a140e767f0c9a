#include "server/control/epoch_sampler.h"

#include <algorithm>
#include <map>
#include <set>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

std::vector<std::pair<uint64_t, uint64_t>> Flatten(const SampleBatch& b) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const SampleSpan& s : b) {
    for (uint64_t id : s.ids) out.emplace_back(s.epoch, id);
  }
  return out;
}

TEST_CASE("Permutation is a deterministic shuffle of [0, n), new per epoch") {
  const std::vector<uint64_t> a = EpochSampler::Permutation(1000, 7, 0);
  REQUIRE(a == EpochSampler::Permutation(1000, 7, 0));
  REQUIRE(a != EpochSampler::Permutation(1000, 7, 1));
  REQUIRE(a != EpochSampler::Permutation(1000, 8, 0));
  std::vector<uint64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (uint64_t i = 0; i < 1000; ++i) REQUIRE(sorted[i] == i);
}

TEST_CASE("Batches of changing sizes cover each epoch exactly once, spanning the boundary") {
  EpochSampler s(3);
  REQUIRE(s.SetDatasetSize(100).ok());
  std::map<uint64_t, std::multiset<uint64_t>> seen;
  const int64_t sizes[] = {7, 33, 1, 50, 13, 29, 64, 3};  // 200 in all: two epochs
  int two_spans = 0;
  for (int64_t k : sizes) {
    const SampleBatch b = s.Take(k);
    REQUIRE(CountSamples(b) == k);
    two_spans += b.size() == 2;
    for (const auto& [epoch, id] : Flatten(b)) seen[epoch].insert(id);
  }
  REQUIRE(two_spans == 1);  // 7+33+1+50 = 91, then 13 crosses into epoch 1
  REQUIRE(seen.size() == 2);
  for (const auto& [epoch, ids] : seen) {
    REQUIRE(ids.size() == 100);
    REQUIRE(std::set<uint64_t>(ids.begin(), ids.end()).size() == 100);
  }
}

TEST_CASE("Returned samples are handed out again first, in order, with their epoch") {
  EpochSampler s(1);
  REQUIRE(s.SetDatasetSize(10).ok());
  const SampleBatch first = s.Take(8);
  const SampleBatch second = s.Take(4);  // 2 of epoch 0, 2 of epoch 1
  REQUIRE(second.size() == 2);
  s.Return(second);
  REQUIRE(Flatten(s.Take(4)) == Flatten(second));
  s.Return(first);
  const auto again = Flatten(s.Take(3));
  const auto head = Flatten(first);
  REQUIRE(again == std::vector<std::pair<uint64_t, uint64_t>>(head.begin(), head.begin() + 3));
}

TEST_CASE("The state round-trips with the outstanding samples as pending") {
  EpochSampler s(5);
  REQUIRE(s.SetDatasetSize(50).ok());
  (void)s.Take(20);
  const SampleBatch held = s.Take(6);  // assigned to a worker, not trained
  const SamplerState state = s.State({&held});
  REQUIRE(state.pending.size() == 6);
  EpochSampler restored(99);
  REQUIRE(restored.Restore(state).ok());
  REQUIRE(Flatten(restored.Take(6)) == Flatten(held));
  REQUIRE(Flatten(restored.Take(24)) == Flatten(s.Take(24)));  // then where the permutation stood
}

TEST_CASE("A job's samples end its last batches short; returned samples are handed out after the end") {
  EpochSampler s(2);
  REQUIRE(s.SetDatasetSize(10).ok());
  REQUIRE(s.SetJobSamples(25).ok());  // two and a half epochs
  REQUIRE(s.SetJobSamples(25).ok());
  REQUIRE(s.SetJobSamples(0).ok());  // a worker that stops by its iterations
  REQUIRE(s.SetJobSamples(30).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(CountSamples(s.Take(12)) == 12);
  REQUIRE(CountSamples(s.Take(12)) == 12);
  REQUIRE(!s.exhausted());
  const SampleBatch last = s.Take(12);
  REQUIRE(Flatten(last) == std::vector<std::pair<uint64_t, uint64_t>>{{2, EpochSampler::Permutation(10, 2, 2)[4]}});
  REQUIRE(s.exhausted());
  REQUIRE(s.Take(5).empty());
  s.Return(last);  // its worker was lost: the sample is trained by another
  REQUIRE(!s.exhausted());
  REQUIRE(Flatten(s.Take(5)) == Flatten(last));
  REQUIRE(s.exhausted());
}

TEST_CASE("Size mismatches and impossible states are refused") {
  EpochSampler s(1);
  REQUIRE(!s.enabled());
  REQUIRE(s.Take(5).empty());
  REQUIRE(s.SetDatasetSize(0).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(s.SetDatasetSize(10).ok());
  REQUIRE(s.SetDatasetSize(11).code() == absl::StatusCode::kInvalidArgument);
  SamplerState bad;
  bad.dataset_size = 10;
  bad.cursor = 11;
  REQUIRE(s.Restore(bad).code() == absl::StatusCode::kInvalidArgument);
  bad.cursor = 0;
  bad.pending = {{0, 10}};
  REQUIRE(s.Restore(bad).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
