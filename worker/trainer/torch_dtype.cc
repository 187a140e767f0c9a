#include "worker/trainer/torch_dtype.h"

#include <iterator>

#include "common/tensor_dtype.h"

namespace omnilearn {
namespace worker {
namespace {

// LibTorch's type of each of kTensorDtypes, in its order.
constexpr torch::ScalarType kScalarTypes[] = {torch::kFloat32, torch::kFloat64, torch::kFloat16, torch::kBFloat16,
                                              torch::kInt64,   torch::kInt32,   torch::kInt16,   torch::kInt8,
                                              torch::kUInt8,   torch::kBool};
static_assert(std::size(kScalarTypes) == std::size(kTensorDtypes), "one torch type per dtype");

}  // namespace

std::string DtypeName(torch::ScalarType type) {
  for (size_t i = 0; i < std::size(kScalarTypes); ++i) {
    if (kScalarTypes[i] == type) return std::string(kTensorDtypes[i].name);
  }
  return c10::toString(type);
}

std::optional<torch::ScalarType> ScalarTypeOf(absl::string_view name) {
  for (size_t i = 0; i < std::size(kTensorDtypes); ++i) {
    if (kTensorDtypes[i].name == name) return kScalarTypes[i];
  }
  return std::nullopt;
}

}  // namespace worker
}  // namespace omnilearn
