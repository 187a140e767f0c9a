#include "common/tensor_codec.h"

#include <cmath>
#include <numeric>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace {

ModelLayout TwoTensors() {
  auto l = ModelLayout::Create({{"w", {3, 4}}, {"b", {4}}});
  REQUIRE(l.ok());
  return *l;
}

TEST_CASE("chunks round-trip through the assembler", "[codec]") {
  const ModelLayout layout = TwoTensors();
  std::vector<float> flat(layout.total_elements());
  std::iota(flat.begin(), flat.end(), 0.5f);
  std::vector<v1::TensorChunk> chunks;
  REQUIRE(ForEachChunk(layout, flat.data(), 5 * sizeof(float), [&](v1::TensorChunk& c) {
    chunks.push_back(c);
    return true;
  }));
  REQUIRE(chunks.size() == 4);  // 12 values in 5+5+2, then 4
  ChunkAssembler a(&layout);
  for (const auto& c : chunks) REQUIRE(a.Add(c).ok());
  auto out = a.Finish();
  REQUIRE(out.ok());
  REQUIRE(*out == flat);
  REQUIRE(a.bytes_received() == 16 * 4);
}

TEST_CASE("the assembler reuses a buffer and notices any NaN or Inf while copying", "[codec]") {
  const ModelLayout layout = TwoTensors();
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    for (int at : {0, 7, 15}) {
      std::vector<float> flat(layout.total_elements(), 1.0f);
      flat[at] = bad;
      std::vector<float> reused(64, 9.0f);  // larger and dirty: resized, overwritten
      const float* storage = reused.data();
      ChunkAssembler a(&layout, std::move(reused));
      ForEachChunk(layout, flat.data(), 5 * sizeof(float), [&](v1::TensorChunk& c) { return a.Add(c).ok(); });
      REQUIRE_FALSE(a.all_finite());
      auto out = *a.Finish();
      REQUIRE(out.data() == storage);
      REQUIRE(out.size() == 16);
      REQUIRE(out[(at + 1) % 16] == 1.0f);
    }
  }
  std::vector<float> fine(16, 1e38f);
  REQUIRE(AllFinite(fine));
  fine[3] = NAN;
  REQUIRE_FALSE(AllFinite(fine));
}

TEST_CASE("the assembler rejects bad chunks", "[codec]") {
  const ModelLayout layout = TwoTensors();
  std::vector<float> flat(layout.total_elements(), 1.0f);
  std::vector<v1::TensorChunk> chunks;
  ForEachChunk(layout, flat.data(), kMaxChunkBytes, [&](v1::TensorChunk& c) {
    chunks.push_back(c);
    return true;
  });
  REQUIRE(chunks.size() == 2);
  {
    ChunkAssembler a(&layout);
    v1::TensorChunk c = chunks[0];
    c.set_name("nope");
    REQUIRE(a.Add(c).code() == absl::StatusCode::kInvalidArgument);
  }
  {
    ChunkAssembler a(&layout);
    v1::TensorChunk c = chunks[0];
    c.set_shape(0, 4);
    REQUIRE(a.Add(c).code() == absl::StatusCode::kInvalidArgument);
  }
  {
    ChunkAssembler a(&layout);
    v1::TensorChunk c = chunks[0];
    c.mutable_data()->push_back('x');  // ragged
    REQUIRE(a.Add(c).code() == absl::StatusCode::kInvalidArgument);
  }
  {
    ChunkAssembler a(&layout);
    REQUIRE(a.Add(chunks[0]).ok());
    REQUIRE(a.Add(chunks[0]).code() == absl::StatusCode::kInvalidArgument);  // repeated
  }
  {
    ChunkAssembler a(&layout);
    REQUIRE(a.Add(chunks[0]).ok());
    REQUIRE(a.Finish().status().code() == absl::StatusCode::kInvalidArgument);  // "b" missing
  }
  REQUIRE(AllFinite(flat));
  flat[3] = std::nanf("");
  REQUIRE_FALSE(AllFinite(flat));
}

TEST_CASE("layouts are validated", "[codec]") {
  REQUIRE_FALSE(ModelLayout::Create({}).ok());
  REQUIRE_FALSE(ModelLayout::Create({{"a", {2}}, {"a", {3}}}).ok());
  REQUIRE_FALSE(ModelLayout::Create({{"a", {-1}}}).ok());
  REQUIRE_FALSE(ModelLayout::Create({{"", {1}}}).ok());
  const ModelLayout l = TwoTensors();
  REQUIRE(l.total_elements() == 16);
  REQUIRE(l.offset(1) == 12);
  auto back = ParseLayout(LayoutToProto(l));
  REQUIRE(back.ok());
  REQUIRE(*back == l);
}

}  // namespace
}  // namespace omnilearn
