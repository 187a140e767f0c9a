// Training data for the worker: Fashion-MNIST from IDX .gz files, synthetic data, or a
// file of named tensors written from Python.
#ifndef OMNILEARN_WORKER_TRAINER_DATASET_H_
#define OMNILEARN_WORKER_TRAINER_DATASET_H_

#include <torch/torch.h>

#include <string>

#include "absl/status/statusor.h"

namespace omnilearn {
namespace worker {

struct Dataset {
  torch::Tensor images;  // [N, ...] float32 (Fashion-MNIST, synthetic: [N, 1, 28, 28] normalized)
  torch::Tensor labels;  // [N] int64 class indices (Fashion-MNIST, synthetic: in [0, 10))
  int64_t size() const { return labels.size(0); }
};

// Debian's dataset-fashion-mnist puts the files here.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// --dataset=tensors:PATH names a file for LoadTensorFile.
inline constexpr char kTensorsPrefix[] = "tensors:";

// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz from `dir`.
// NotFound / DataLoss with the file's name on a missing or malformed file.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, bool train);

// A safetensors file (e.g. from Python's omnilearn.save_tensors) holding `train_x`
// [N, ...] of any numeric dtype (used as float32, as is: normalize before saving) and
// `train_y` [N] of integer class indices >= 0, and optionally `test_x`, `test_y` (the same
// sample shape). `test` is filled when both test tensors are there (else left empty).
// NotFound for a missing file or tensor, InvalidArgument naming the tensor for a wrong
// dtype or shape, DataLoss for a corrupt file.
absl::Status LoadTensorFile(const std::string& path, Dataset* train, Dataset* test);

// A learnable 10-class problem of the same shape: class templates (fixed) plus noise
// drawn from `seed`.
Dataset MakeSynthetic(int64_t n, uint64_t seed);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_DATASET_H_
