// The model a worker trains: a built-in MLP or small CNN, or a user's TorchScript module.
#ifndef OMNILEARN_WORKER_TRAINER_MODEL_H_
#define OMNILEARN_WORKER_TRAINER_MODEL_H_

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace omnilearn {
namespace worker {

// Not thread-safe.
class Model {
 public:
  virtual ~Model() = default;
  // [B, 1, 28, 28] -> [B, 10] logits.
  virtual torch::Tensor Forward(const torch::Tensor& x) = 0;
  // Trainable parameters in a fixed order with stable names (the wire layout).
  virtual std::vector<std::pair<std::string, torch::Tensor>> Parameters() = 0;
  // Non-trainable buffers (BatchNorm running_mean, running_var, num_batches_tracked) in
  // a fixed order with stable names; they follow the parameters in the wire layout.
  virtual std::vector<std::pair<std::string, torch::Tensor>> Buffers() = 0;
  virtual void SetTraining(bool on) = 0;
  virtual void To(const torch::Device& device) = 0;
  // Writes the module with its current weights for torch.jit.load. Only TorchScript
  // models (model_file) can: InvalidArgument for the built-in ones.
  virtual absl::Status Save(const std::string& path) = 0;
};

// The built-in models' names: "mlp", "cnn", and "cnn_bn" (the CNN with BatchNorm).
inline constexpr const char* kModelNames[] = {"mlp", "cnn", "cnn_bn"};
// A built-in model initialized from `seed`. InvalidArgument for other names (listing
// the valid ones).
absl::StatusOr<std::unique_ptr<Model>> MakeModel(const std::string& name, uint64_t seed);
// A TorchScript module saved from Python (torch.jit.script(m).save(path)) taking
// [B, 1, 28, 28] and returning [B, 10] logits. InvalidArgument if it cannot be loaded.
absl::StatusOr<std::unique_ptr<Model>> LoadScriptedModel(const std::string& path);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_MODEL_H_
