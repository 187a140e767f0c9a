// Training data for the worker: Fashion-MNIST from IDX .gz files, or synthetic data.
#ifndef OMNILEARN_WORKER_DATASET_H_
#define OMNILEARN_WORKER_DATASET_H_

#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"

namespace omnilearn {
namespace worker {

struct Dataset {
  torch::Tensor images;  // [N, 1, 28, 28] float32, normalized
  torch::Tensor labels;  // [N] int64 in [0, 10)
  int64_t size() const { return labels.size(0); }
};

// Debian's dataset-fashion-mnist puts the files here.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`.
// NotFound / DataLoss with the file's name on a missing or malformed file.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train);

// A learnable 10-class problem of the same shape: class templates (fixed) plus noise
// drawn from `seed`.
Dataset MakeSynthetic(int64_t n, uint64_t seed);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_DATASET_H_
