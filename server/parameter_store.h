// The model weights and the optimizer (SGD with momentum and weight decay).
#ifndef OMNILEARN_SERVER_PARAMETER_STORE_H_
#define OMNILEARN_SERVER_PARAMETER_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/model_layout.h"

namespace omnilearn {
namespace server {

struct OptimizerOptions {
  double learning_rate = 0.05;   // for one step on a gradient averaged over the global batch
  double momentum = 0.9;
  double weight_decay = 1e-4;
  // Step decay: the rate is multiplied by lr_decay every lr_decay_steps model versions
  // (0 = constant). lr(v) = learning_rate * lr_decay ^ floor(v / lr_decay_steps).
  uint64_t lr_decay_steps = 0;
  double lr_decay = 0.1;
};

// Thread-compatible: the server core serializes access. Snapshots returned by
// weights() are immutable and may be read from any thread.
class ParameterStore {
 public:
  explicit ParameterStore(const OptimizerOptions& options) : options_(options) {}

  // Sets the model. FailedPrecondition if already set; InvalidArgument on a size
  // mismatch or non-finite values.
  absl::Status Initialize(ModelLayout layout, std::vector<float> values, uint64_t version = 0);
  bool initialized() const { return weights_ != nullptr; }

  // One optimizer step: v = momentum * v + g + wd * w;  w -= lr(version) * lr_scale * v.
  // A gradient's total displacement is lr * lr_scale * g / (1 - momentum), so a push
  // with lr_scale = b/B moves the model by its share of one global-batch step.
  // Bumps the version. The gradient must have layout().total_elements() finite values
  // (checked by callers).
  // `momentum` overrides OptimizerOptions::momentum for this step when >= 0.
  void Apply(const std::vector<float>& gradient, double lr_scale, double momentum = -1);

  double LearningRate() const;
  uint64_t version() const { return version_; }
  const ModelLayout& layout() const { return layout_; }
  std::shared_ptr<const std::vector<float>> weights() const { return weights_; }
  // The optimizer's state buffers by name ("momentum" for SGD), each the model's size.
  std::vector<std::pair<std::string, std::vector<float>>> OptimizerState() const;
  // Sets the model and the optimizer state from a checkpoint. FailedPrecondition if the
  // model is already set; InvalidArgument on sizes, non-finite values, or a buffer this
  // optimizer does not have (or lacks).
  absl::Status Restore(ModelLayout layout, std::vector<float> weights,
                       std::vector<std::pair<std::string, std::vector<float>>> state, uint64_t version);

 private:
  OptimizerOptions options_;
  ModelLayout layout_;
  std::shared_ptr<const std::vector<float>> weights_;  // copy-on-write per step
  std::vector<float> velocity_;
  uint64_t version_ = 0;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_PARAMETER_STORE_H_
