// A tensor's type between LibTorch and the names the layout and safetensors use
// (common/tensor_dtype.h's kTensorDtypes): one table, both ways.
#ifndef OMNILEARN_WORKER_TRAINER_TORCH_DTYPE_H_
#define OMNILEARN_WORKER_TRAINER_TORCH_DTYPE_H_

#include <torch/torch.h>

#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace omnilearn {
namespace worker {

// A tensor's type as the layout names it: what the server's export writes it as. Another
// type keeps torch's name, which the layout refuses.
std::string DtypeName(torch::ScalarType type);

// The torch type of a kTensorDtypes name; nullopt for any other name.
std::optional<torch::ScalarType> ScalarTypeOf(absl::string_view name);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_TORCH_DTYPE_H_
