// The types a model holds its tensors in, as safetensors names them, and float32 values
// to and from their little-endian bytes. The server computes in float32 whatever a
// tensor's type; an export writes each tensor back in its own (common/safetensors.h).
#ifndef OMNILEARN_COMMON_TENSOR_DTYPE_H_
#define OMNILEARN_COMMON_TENSOR_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

namespace omnilearn {

// One tensor type: its safetensors name (what layouts, checkpoints and the wire's index
// name it by), its bytes per element, and the name numpy, PyTorch and TensorFlow give it.
struct TensorDtype {
  absl::string_view name;
  int bytes;
  absl::string_view framework_name;
};

// Every type, in the order of the proto's TensorDtype (F32 first: what a tensor without one
// is). The one table: the LibTorch worker binds its types to it (worker/trainer/torch_dtype.cc) and
// the Python library reads it from omnilearn._core (python/omnilearn/tensor_files.py).
inline constexpr TensorDtype kTensorDtypes[] = {
    {"F32", 4, "float32"}, {"F64", 8, "float64"}, {"F16", 2, "float16"}, {"BF16", 2, "bfloat16"}, {"I64", 8, "int64"},
    {"I32", 4, "int32"},   {"I16", 2, "int16"},   {"I8", 1, "int8"},     {"U8", 1, "uint8"},      {"BOOL", 1, "bool"}};

// bfloat16: a float32's upper 16 bits, rounded to nearest even; NaN stays NaN, Inf Inf.
// Inline: the wire's bfloat16 loops (common/tensor_codec.h) vectorize through them.
inline uint16_t ToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // a quiet NaN
  // Round to nearest, ties to even: add 0x7fff plus the bit that would become the last.
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline float FromBfloat16(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// Bytes per element of `dtype`, or 0 for a name not in kTensorDtypes.
int TensorDtypeBytes(absl::string_view dtype);
inline bool IsTensorDtype(absl::string_view dtype) { return TensorDtypeBytes(dtype) > 0; }

// `n` values as `dtype`'s little-endian bytes. Floating types round to nearest even
// (F16 and BF16 keep Inf and NaN; F16 overflows to Inf); integer types and BOOL round to
// the nearest integer (ties to even, as torch.round), saturate at the type's range and
// take NaN as 0; BOOL is that integer != 0. `dtype` must be a kTensorDtypes name.
std::string EncodeTensorValues(absl::string_view dtype, const float* values, int64_t n);

// The inverse: `n` values of `dtype` from `bytes` (n x TensorDtypeBytes(dtype) of them,
// any alignment) as float32 into `out` (I64, I32 and F64 beyond float's precision round).
void DecodeTensorValues(absl::string_view dtype, const char* bytes, int64_t n, float* out);

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_TENSOR_DTYPE_H_
