// Which samples a worker trains: the ones the server assigned (SampleSource checks them
// against the data set), or, from a server that assigns none (a v1 server), the worker's
// own permutation of its data set; and the log of the samples trained (--log_samples).
#ifndef OMNILEARN_WORKER_TRAINER_SAMPLES_H_
#define OMNILEARN_WORKER_TRAINER_SAMPLES_H_

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "worker/client/ps_types.h"

namespace omnilearn {
namespace worker {

// Where each step's samples come from: the server's assignment, or, from a server that
// assigns none (an older one), this worker's own shuffled order, seeded by the name too
// so that two such workers do not train the same order.
class SampleSource {
 public:
  // `seed` seeds the worker's own permutation (each worker of a job its own).
  SampleSource(uint64_t seed, int64_t dataset_size)
      : n_(dataset_size),
        gen_(torch::make_generator<torch::CPUGeneratorImpl>(seed)),
        order_(torch::randperm(n_, gen_)) {}

  // The step's sample ids (the batch is their count).
  absl::StatusOr<torch::Tensor> Next(const Assignment& spans, int64_t own_batch) {
    std::vector<int64_t> assigned;
    for (const SampleSpan& span : spans) assigned.insert(assigned.end(), span.ids.begin(), span.ids.end());
    if (!assigned.empty()) {
      for (int64_t id : assigned) {
        if (id < 0 || id >= n_) {
          return absl::InvalidArgumentError(absl::StrCat("the server assigned sample ", id, " of a data set of ", n_));
        }
      }
      return torch::from_blob(assigned.data(), {static_cast<int64_t>(assigned.size())}, torch::kInt64).clone();
    }
    if (cursor_ + own_batch > n_) {
      order_ = torch::randperm(n_, gen_);
      cursor_ = 0;
    }
    torch::Tensor idx = order_.narrow(0, cursor_, own_batch);
    cursor_ += own_batch;
    return idx;
  }

 private:
  const int64_t n_;
  torch::Generator gen_;
  torch::Tensor order_;
  int64_t cursor_ = 0;
};

// Test aid (log_samples): "epoch id" for every sample of every applied push.
class SampleLog {
 public:
  absl::Status Open(const std::string& path) {
    if (path.empty()) return absl::OkStatus();
    file_.reset(std::fopen(path.c_str(), "w"));
    if (!file_) return absl::InvalidArgumentError(absl::StrCat("cannot write log_samples=", path));
    return absl::OkStatus();
  }
  void Applied(const Assignment& spans) {
    if (!file_) return;
    for (const SampleSpan& span : spans) {
      for (uint64_t id : span.ids) std::fprintf(file_.get(), "%lu %lu\n", span.epoch, id);
    }
    std::fflush(file_.get());
  }

 private:
  std::unique_ptr<FILE, int (*)(FILE*)> file_{nullptr, &std::fclose};
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_SAMPLES_H_
