#include "common/tensor_dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace {

template <typename T>
std::vector<T> As(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::vector<float> RoundTrip(absl::string_view dtype, const std::vector<float>& values) {
  const std::string bytes = EncodeTensorValues(dtype, values.data(), static_cast<int64_t>(values.size()));
  REQUIRE(bytes.size() == values.size() * TensorDtypeBytes(dtype));
  std::vector<float> out(values.size());
  DecodeTensorValues(dtype, bytes.data(), static_cast<int64_t>(values.size()), out.data());
  return out;
}

TEST_CASE("every dtype has its width; a name outside the list has none", "[tensor_dtype]") {
  for (const TensorDtype& d : kTensorDtypes) REQUIRE(TensorDtypeBytes(d.name) == d.bytes);
  REQUIRE(TensorDtypeBytes("I64") == 8);
  REQUIRE(TensorDtypeBytes("BF16") == 2);
  REQUIRE(TensorDtypeBytes("BOOL") == 1);
  REQUIRE(TensorDtypeBytes("C64") == 0);
  REQUIRE_FALSE(IsTensorDtype("f32"));
}

TEST_CASE("integer types round to nearest, ties to even, and saturate; NaN is 0", "[tensor_dtype]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {6.6f, 2.5f, 3.5f, -1.5f, 1e20f, -1e20f, nan};
  REQUIRE(
      As<int64_t>(EncodeTensorValues("I64", v.data(), 7)) ==
      std::vector<int64_t>{7, 2, 4, -2, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), 0});
  REQUIRE(As<int8_t>(EncodeTensorValues("I8", v.data(), 7)) == std::vector<int8_t>{7, 2, 4, -2, 127, -128, 0});
  REQUIRE(As<uint8_t>(EncodeTensorValues("U8", v.data(), 7)) == std::vector<uint8_t>{7, 2, 4, 0, 255, 0, 0});
  const std::vector<float> flags = {0.0f, 0.4f, 0.5f, 0.6f, -1.0f, 1.0f};
  REQUIRE(As<uint8_t>(EncodeTensorValues("BOOL", flags.data(), 6)) == std::vector<uint8_t>{0, 0, 0, 1, 1, 1});
  REQUIRE(RoundTrip("I32", {-3.0f, 70000.0f}) == std::vector<float>{-3.0f, 70000.0f});
  REQUIRE(RoundTrip("BOOL", {0.0f, 2.0f}) == std::vector<float>{0.0f, 1.0f});
}

TEST_CASE("half and bfloat16 round to nearest even and keep Inf and NaN; F16 overflows to Inf", "[tensor_dtype]") {
  const float inf = std::numeric_limits<float>::infinity();
  // 1 + 2^-11 lies halfway between two halves: to even (1.0); 1 + 3 x 2^-11 rounds up.
  const std::vector<float> v = {1.0f, -2.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65520.0f, 0x1p-24f, inf};
  const std::vector<float> half = RoundTrip("F16", v);
  REQUIRE(half == std::vector<float>{1.0f, -2.0f, 1.0f, 1.0f + 0x1p-9f, 65504.0f, inf, 0x1p-24f, inf});
  REQUIRE(As<uint16_t>(EncodeTensorValues("F16", v.data(), 2)) == std::vector<uint16_t>{0x3c00, 0xc000});
  REQUIRE(std::isnan(RoundTrip("F16", {std::numeric_limits<float>::quiet_NaN()})[0]));
  // bfloat16 keeps 8 bits of mantissa: 1 + 2^-8 is a tie (to even: 1), 1 + 3 x 2^-8 rounds up.
  REQUIRE(RoundTrip("BF16", {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -inf}) ==
          std::vector<float>{1.0f, 1.0f + 0x1p-6f, -inf});
  REQUIRE(std::isnan(RoundTrip("BF16", {std::numeric_limits<float>::quiet_NaN()})[0]));
}

TEST_CASE("F32 and F64 carry float32 values exactly", "[tensor_dtype]") {
  const std::vector<float> v = {0.1f, -3.25f, 1e-30f};
  REQUIRE(RoundTrip("F32", v) == v);
  REQUIRE(RoundTrip("F64", v) == v);
  REQUIRE(As<double>(EncodeTensorValues("F64", v.data(), 1))[0] == static_cast<double>(0.1f));
}

}  // namespace
}  // namespace omnilearn
