#include "worker/torch_dtype.h"

#include <utility>

namespace omnilearn {
namespace worker {
namespace {

constexpr std::pair<absl::string_view, torch::ScalarType> kTypes[] = {
    {"F32", torch::kFloat32}, {"F64", torch::kFloat64}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};

}  // namespace

std::string DtypeName(torch::ScalarType type) {
  for (const auto& [name, t] : kTypes) {
    if (t == type) return std::string(name);
  }
  return c10::toString(type);
}

std::optional<torch::ScalarType> ScalarTypeOf(absl::string_view name) {
  for (const auto& [n, t] : kTypes) {
    if (n == name) return t;
  }
  return std::nullopt;
}

}  // namespace worker
}  // namespace omnilearn
