#include "worker/flat_model.h"

namespace omnilearn {
namespace worker {

std::string DtypeName(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32:
      return "F32";
    case torch::kFloat64:
      return "F64";
    case torch::kFloat16:
      return "F16";
    case torch::kBFloat16:
      return "BF16";
    case torch::kInt64:
      return "I64";
    case torch::kInt32:
      return "I32";
    case torch::kInt16:
      return "I16";
    case torch::kInt8:
      return "I8";
    case torch::kUInt8:
      return "U8";
    case torch::kBool:
      return "BOOL";
    default:
      return c10::toString(type);
  }
}

}  // namespace worker
}  // namespace omnilearn
