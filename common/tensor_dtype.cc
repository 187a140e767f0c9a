#include "common/tensor_dtype.h"

#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace omnilearn {
namespace {

uint32_t Bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}

float FromBits(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

uint16_t ToHalf(float f) {
  const uint32_t x = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and beyond round to Inf
  if (a < 0x38800000u) {                        // below 2^-14: a subnormal half (or 0)
    return sign | static_cast<uint16_t>(std::nearbyint(FromBits(a) * 16777216.0f));
  }
  // Rebias the exponent (127 -> 15) and round the mantissa's 13 dropped bits to even.
  return sign | static_cast<uint16_t>((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13);
}

float FromHalf(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ffu;
  float v;
  if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    v = mantissa != 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mantissa | 0x400u), exponent - 25);
  }
  return (h & 0x8000u) != 0 ? -v : v;
}

// Round to nearest (ties to even), saturate at T's range, NaN as 0.
template <typename T>
T ToInteger(float f) {
  if (std::isnan(f)) return 0;
  const double r = std::nearbyint(static_cast<double>(f));
  if (r <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (r >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(r);
}

template <typename T, typename Convert>
std::string Encode(const float* values, int64_t n, Convert convert) {
  std::string out(static_cast<size_t>(n) * sizeof(T), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const T v = convert(values[i]);
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
  return out;
}

template <typename T, typename Convert>
void Decode(const char* bytes, int64_t n, float* out, Convert convert) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, bytes + i * sizeof(T), sizeof(T));
    out[i] = convert(v);
  }
}

template <typename T>
float AsFloat(T v) {
  return static_cast<float>(v);
}

}  // namespace

int TensorDtypeBytes(absl::string_view dtype) {
  for (const TensorDtype& t : kTensorDtypes) {
    if (t.name == dtype) return t.bytes;
  }
  return 0;
}

std::string EncodeTensorValues(absl::string_view dtype, const float* values, int64_t n) {
  if (dtype == "F64") return Encode<double>(values, n, [](float f) { return static_cast<double>(f); });
  if (dtype == "F16") return Encode<uint16_t>(values, n, ToHalf);
  if (dtype == "BF16") return Encode<uint16_t>(values, n, ToBfloat16);
  if (dtype == "I64") return Encode<int64_t>(values, n, ToInteger<int64_t>);
  if (dtype == "I32") return Encode<int32_t>(values, n, ToInteger<int32_t>);
  if (dtype == "I16") return Encode<int16_t>(values, n, ToInteger<int16_t>);
  if (dtype == "I8") return Encode<int8_t>(values, n, ToInteger<int8_t>);
  if (dtype == "U8") return Encode<uint8_t>(values, n, ToInteger<uint8_t>);
  if (dtype == "BOOL") return Encode<uint8_t>(values, n, [](float f) { return uint8_t{ToInteger<int64_t>(f) != 0}; });
  return std::string(reinterpret_cast<const char*>(values), static_cast<size_t>(n) * sizeof(float));  // F32
}

void DecodeTensorValues(absl::string_view dtype, const char* bytes, int64_t n, float* out) {
  if (dtype == "F64") return Decode<double>(bytes, n, out, AsFloat<double>);
  if (dtype == "F16") return Decode<uint16_t>(bytes, n, out, FromHalf);
  if (dtype == "BF16") return Decode<uint16_t>(bytes, n, out, FromBfloat16);
  if (dtype == "I64") return Decode<int64_t>(bytes, n, out, AsFloat<int64_t>);
  if (dtype == "I32") return Decode<int32_t>(bytes, n, out, AsFloat<int32_t>);
  if (dtype == "I16") return Decode<int16_t>(bytes, n, out, AsFloat<int16_t>);
  if (dtype == "I8") return Decode<int8_t>(bytes, n, out, AsFloat<int8_t>);
  if (dtype == "U8") return Decode<uint8_t>(bytes, n, out, AsFloat<uint8_t>);
  if (dtype == "BOOL") return Decode<uint8_t>(bytes, n, out, [](uint8_t b) { return b != 0 ? 1.0f : 0.0f; });
  std::memcpy(out, bytes, static_cast<size_t>(n) * sizeof(float));  // F32
}

}  // namespace omnilearn
