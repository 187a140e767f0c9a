#include "common/enum_names.h"

#include "catch2/catch.hpp"
#include "proto/omnilearn.pb.h"

namespace omnilearn {
namespace {

TEST_CASE("enum names come from the proto's descriptors", "[enum]") {
  REQUIRE(EnumName(v1::MODE_SYNC) == "sync");
  REQUIRE(EnumName(v1::MODE_SSP) == "ssp");
  REQUIRE(EnumName(v1::WORKER_STATE_DROPPED) == "dropped");
  REQUIRE(EnumName(v1::DEVICE_CUDA) == "cuda");
  REQUIRE(EnumName(v1::WIRE_DTYPE_BF16) == "bf16");
  REQUIRE(EnumName(v1::ACTION_CONTINUE) == "continue");
  REQUIRE(EnumName(static_cast<v1::Mode>(77)) == "?");
  REQUIRE(ParseEnumName<v1::Mode>("async") == v1::MODE_ASYNC);
  REQUIRE(ParseEnumName<v1::WireDtype>("f32") == v1::WIRE_DTYPE_F32);
  REQUIRE_FALSE(ParseEnumName<v1::Mode>("lockstep").has_value());
  REQUIRE_FALSE(ParseEnumName<v1::WireDtype>("BF16").has_value());  // the names as written, only
  REQUIRE(ShortEnumNames(*v1::Mode_descriptor(), /*skip_zero=*/true) ==
          std::vector<std::string>{"sync", "async", "ssp"});
}

}  // namespace
}  // namespace omnilearn
