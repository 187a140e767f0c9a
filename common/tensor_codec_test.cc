#include "common/tensor_codec.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "absl/strings/match.h"
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
  // The model's types travel with the layout; one the proto does not know is refused.
  const ModelLayout typed = *ModelLayout::Create({{"w", {2}}, {"steps", {}, true, "I64"}, {"mask", {3}, true, "BOOL"}});
  v1::ModelLayout proto = LayoutToProto(typed);
  REQUIRE(proto.tensors(0).dtype() == v1::TENSOR_DTYPE_F32);
  REQUIRE(proto.tensors(1).dtype() == v1::TENSOR_DTYPE_I64);
  REQUIRE(proto.tensors(2).dtype() == v1::TENSOR_DTYPE_BOOL);
  auto typed_back = ParseLayout(proto);
  REQUIRE(typed_back.ok());
  REQUIRE((typed_back->tensors()[1].dtype == "I64" && typed_back->tensors()[2].dtype == "BOOL"));
  proto.mutable_tensors(1)->set_dtype(static_cast<v1::TensorDtype>(42));  // from a later release
  REQUIRE(absl::StrContains(ParseLayout(proto).status().message(), "unknown dtype 42"));
  REQUIRE(absl::StrContains(ModelLayout::Create({{"w", {2}, false, "C64"}}).status().message(), "unknown dtype"));
}

// Splits `bytes` into pieces at the given cut points (gRPC's slices can end anywhere).
std::vector<absl::string_view> Cut(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<absl::string_view> pieces;
  size_t at = 0;
  for (size_t c : cuts) {
    c = std::min(c, bytes.size());
    if (c < at) continue;
    pieces.push_back(absl::string_view(bytes).substr(at, c - at));
    at = c;
  }
  pieces.push_back(absl::string_view(bytes).substr(at));
  return pieces;
}

std::string Join(const std::vector<absl::string_view>& pieces) {
  std::string out;
  for (absl::string_view p : pieces) out.append(p.data(), p.size());
  return out;
}

TEST_CASE("a hand-encoded chunk is the message protobuf parses", "[codec][wire]") {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  const std::string payload(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  for (int64_t offset : {int64_t{0}, int64_t{7}, int64_t{1} << 40}) {
    const std::string bytes = ChunkPrefix(2, "layer.weight", {300, 2}, offset, payload.size()) + payload;
    v1::PushRequest parsed;
    REQUIRE(parsed.ParseFromString(bytes));
    REQUIRE(parsed.has_chunk());
    CHECK(parsed.chunk().name() == "layer.weight");
    CHECK(std::vector<int64_t>(parsed.chunk().shape().begin(), parsed.chunk().shape().end()) ==
          std::vector<int64_t>{300, 2});
    CHECK(parsed.chunk().offset() == offset);
    CHECK(parsed.chunk().data() == payload);
    // And the reader takes back what it wrote, however the bytes are cut.
    for (size_t cut = 0; cut <= bytes.size(); ++cut) {
      ChunkView view;
      REQUIRE(ParseChunkEnvelope(Cut(bytes, {cut}), 2, &view));
      CHECK(view.name == "layer.weight");
      CHECK(view.shape == std::vector<int64_t>{300, 2});
      CHECK(view.offset == offset);
      CHECK(view.data_bytes == static_cast<int64_t>(payload.size()));
      CHECK(Join(view.data) == payload);
    }
  }
  // A scalar tensor (no shape) and an empty payload.
  v1::PullResponse empty;
  REQUIRE(empty.ParseFromString(ChunkPrefix(2, "s", {}, 0, 0)));
  CHECK(empty.chunk().name() == "s");
  CHECK(empty.chunk().shape_size() == 0);
  CHECK(empty.chunk().data().empty());
}

// Whether the in-place reader takes `bytes` (cut into pieces); when it does, protobuf must
// parse them to the same chunk.
bool InPlaceAgrees(const std::string& bytes, std::vector<size_t> cuts) {
  ChunkView view;
  if (!ParseChunkEnvelope(Cut(bytes, std::move(cuts)), 2, &view)) return false;
  v1::PushRequest parsed;
  REQUIRE(parsed.ParseFromString(bytes));
  REQUIRE(parsed.has_chunk());
  CHECK(view.name == parsed.chunk().name());
  CHECK(view.shape == std::vector<int64_t>(parsed.chunk().shape().begin(), parsed.chunk().shape().end()));
  CHECK(view.offset == parsed.chunk().offset());
  CHECK(Join(view.data) == parsed.chunk().data());
  return true;
}

TEST_CASE("tags and lengths longer than protobuf reads are left to protobuf", "[codec][wire]") {
  // A chunk {name: "w"} in envelope field 2, with its name's tag or length over-long.
  const std::string plain = std::string("\x12\x03\x0a\x01w", 5);
  REQUIRE(InPlaceAgrees(plain, {}));
  const std::string tag5 = std::string("\x12\x07\x8a\x80\x80\x80\x00\x01w", 9);  // 5 bytes: protobuf's most
  REQUIRE(InPlaceAgrees(tag5, {}));
  const std::string tag6 = std::string("\x12\x08\x8a\x80\x80\x80\x80\x00\x01w", 10);
  CHECK_FALSE(InPlaceAgrees(tag6, {}));
  CHECK_FALSE(v1::PushRequest().ParseFromString(tag6));
  const std::string len6 = std::string("\x12\x08\x0a\x81\x80\x80\x80\x80\x00w", 10);
  CHECK_FALSE(InPlaceAgrees(len6, {}));
  CHECK_FALSE(v1::PushRequest().ParseFromString(len6));
}

TEST_CASE("the in-place reader agrees with protobuf or leaves the message to it", "[codec][wire]") {
  // Differential: random edits of valid chunk messages (and of other messages). Whenever
  // the reader takes a message, protobuf parses it to the same chunk.
  std::mt19937 rng(7);
  v1::PushRequest seeds[3];
  seeds[0].mutable_chunk()->set_name("w");
  seeds[0].mutable_chunk()->add_shape(3);
  seeds[0].mutable_chunk()->add_shape(4);
  seeds[0].mutable_chunk()->set_offset(5);
  seeds[0].mutable_chunk()->set_data(std::string(28, '\x01'));
  seeds[1].mutable_header()->set_worker_id(9);
  seeds[2].mutable_chunk()->set_name("b");
  int taken = 0, left = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = seeds[trial % 3].SerializeAsString();
    for (int edits = rng() % 4; edits > 0; --edits) {
      const size_t at = bytes.empty() ? 0 : rng() % bytes.size();
      switch (rng() % 5) {
        case 0:
          if (!bytes.empty()) bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes.insert(at, 1, static_cast<char>(rng()));
          break;
        case 2:
          if (!bytes.empty()) bytes.erase(at, 1 + rng() % 3);
          break;
        case 3:  // an unknown field of the chunk, or a repeated known one
          bytes += ChunkPrefix(2, "w", {1}, 0, 0).substr(0, rng() % 8);
          break;
        case 4:  // a continuation byte: over-long varints
          bytes.insert(at, 1, '\x80');
          break;
      }
    }
    INFO("trial " << trial);
    if (InPlaceAgrees(bytes, {rng() % 40, 40 + rng() % 40})) {
      ++taken;
    } else {
      ++left;
    }
  }
  CHECK(taken > 1000);  // the reader is exercised, not only its refusals
  CHECK(left > 1000);
}

TEST_CASE("the assembler copies pieces split anywhere, floats included", "[codec][wire]") {
  const ModelLayout layout = TwoTensors();
  std::vector<float> flat(layout.total_elements());
  std::iota(flat.begin(), flat.end(), 0.25f);
  const std::string w(reinterpret_cast<const char*>(flat.data()), 12 * sizeof(float));
  const std::string b(reinterpret_cast<const char*>(flat.data() + 12), 4 * sizeof(float));
  for (size_t c1 = 0; c1 <= w.size(); c1 += 3) {
    ChunkAssembler a(&layout);
    ChunkView vw{"w", {3, 4}, 0, Cut(w, {c1, c1 + 1, c1 + 6}), static_cast<int64_t>(w.size())};
    ChunkView vb{"b", {4}, 0, Cut(b, {c1 % 16}), static_cast<int64_t>(b.size())};
    REQUIRE(a.Add(vw).ok());
    REQUIRE(a.Add(vb).ok());
    REQUIRE(a.all_finite());
    auto out = a.Finish();
    REQUIRE(out.ok());
    REQUIRE(*out == flat);
  }
  // A zero-sized tensor: an empty payload into no storage at all (found by the fuzzer).
  auto empty = ModelLayout::Create({{"e", {0}}});
  REQUIRE(empty.ok());
  ChunkAssembler z(&*empty);
  REQUIRE(z.Add(ChunkView{"e", {0}, 0, {absl::string_view()}, 0}).ok());
  REQUIRE(z.Finish().ok());
  // A NaN split between two pieces is still seen.
  std::vector<float> bad = {1.0f, std::nanf(""), 2.0f, 3.0f};
  const std::string nb(reinterpret_cast<const char*>(bad.data()), bad.size() * sizeof(float));
  ChunkAssembler a(&layout);
  REQUIRE(a.Add(ChunkView{"b", {4}, 0, Cut(nb, {6}), 16}).ok());
  CHECK_FALSE(a.all_finite());
}

TEST_CASE("bfloat16 keeps a float32's upper half, rounded to nearest even", "[codec][bf16]") {
  REQUIRE(ToBfloat16(1.0f) == 0x3f80);
  REQUIRE(ToBfloat16(-2.0f) == 0xc000);
  REQUIRE(ToBfloat16(0.0f) == 0x0000);
  REQUIRE(ToBfloat16(INFINITY) == 0x7f80);
  REQUIRE(ToBfloat16(-INFINITY) == 0xff80);
  REQUIRE(std::isnan(FromBfloat16(ToBfloat16(std::nanf("")))));
  REQUIRE(std::isnan(FromBfloat16(ToBfloat16(-std::nanf("")))));
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even one (1). Just above
  // halfway goes up; 1 + 3 * 2^-8 is halfway to an even neighbour above.
  REQUIRE(FromBfloat16(ToBfloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  REQUIRE(FromBfloat16(ToBfloat16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) == 1.0f + std::ldexp(1.0f, -7));
  REQUIRE(FromBfloat16(ToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  // The largest finite float rounds up to Inf, as IEEE rounding says.
  REQUIRE(ToBfloat16(std::numeric_limits<float>::max()) == 0x7f80);
  // Relative error at most half an ulp, 2^-8, for normal numbers.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1e6f, 1e6f);
  for (int i = 0; i < 100000; ++i) {
    const float x = u(rng);
    REQUIRE(std::abs(FromBfloat16(ToBfloat16(x)) - x) <= std::abs(x) * std::ldexp(1.0f, -8));
  }
}

TEST_CASE("error feedback: the bfloat16 values sent over many steps add up to the gradients", "[codec][bf16]") {
  std::mt19937 rng(9);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int n = 64, steps = 500;
  std::vector<float> residual(n, 0.0f), grad(n);
  std::vector<uint16_t> wire(n);
  std::vector<double> sent(n, 0.0), truth(n, 0.0), plain(n, 0.0);
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < n; ++i) grad[i] = 1e-3f + 1e-4f * g(rng);  // a small steady signal
    EncodeBfloat16(grad.data(), n, wire.data(), residual.data());
    for (int i = 0; i < n; ++i) {
      sent[i] += FromBfloat16(wire[i]);
      truth[i] += grad[i];
      plain[i] += FromBfloat16(ToBfloat16(grad[i]));
    }
  }
  double feedback_error = 0, plain_error = 0;
  for (int i = 0; i < n; ++i) {
    // What is still owed is the residual: at most half an ulp of the last value sent.
    REQUIRE(std::abs(sent[i] + residual[i] - truth[i]) <= 1e-5 * steps);
    feedback_error = std::max(feedback_error, std::abs(sent[i] - truth[i]) / truth[i]);
    plain_error = std::max(plain_error, std::abs(plain[i] - truth[i]) / truth[i]);
  }
  CAPTURE(feedback_error, plain_error);
  REQUIRE(feedback_error < 1e-4);  // against up to 2^-8 = 4e-3 for one rounding
  REQUIRE(feedback_error < plain_error / 5);
}

TEST_CASE("an in-place assembler writes straight into the caller's buffer", "[codec]") {
  const ModelLayout layout = TwoTensors();
  std::vector<float> target(layout.total_elements(), -1.0f);
  ChunkAssembler a(&layout, ChunkAssembler::InPlace(target.data()), v1::WIRE_DTYPE_F32);
  const std::vector<float> b = {1, 2, 3, 4};
  const std::string bytes(reinterpret_cast<const char*>(b.data()), 16);
  REQUIRE(a.Add(ChunkView{"b", {4}, 0, {bytes}, 16}).ok());
  REQUIRE(std::vector<float>(target.begin() + 12, target.end()) == b);  // already there
  REQUIRE(target[0] == -1.0f);                                          // "w" not yet received: left as it was
  absl::Status incomplete = a.CheckComplete();
  REQUIRE(absl::IsInvalidArgument(incomplete));
  REQUIRE(absl::StrContains(incomplete.message(), "tensor 'w' incomplete: 0 of 12"));
  const std::vector<float> w(12, 0.5f);
  REQUIRE(a.Add(ChunkView{"w", {3, 4}, 0, {std::string(reinterpret_cast<const char*>(w.data()), 48)}, 48}).ok());
  REQUIRE(a.CheckComplete().ok());
  REQUIRE(std::vector<float>(target.begin(), target.begin() + 12) == w);
}

TEST_CASE("bfloat16 chunks are decoded to float32, split anywhere, NaN seen", "[codec][bf16]") {
  const ModelLayout layout = TwoTensors();
  std::vector<float> flat(layout.total_elements());
  std::iota(flat.begin(), flat.end(), 0.25f);  // exact in bfloat16 (k + 1/4 for k < 64)
  std::vector<uint16_t> wire(flat.size());
  EncodeBfloat16(flat.data(), static_cast<int64_t>(flat.size()), wire.data());
  std::vector<std::string> payloads;
  REQUIRE(
      ForEachChunkOf(layout, wire.data(), 2, 10, [&](const TensorSpec& spec, int64_t off, const void* d, int64_t k) {
        payloads.emplace_back(static_cast<const char*>(d), 2 * k);
        return true;
      }));
  REQUIRE(payloads.size() == 4);  // 12 values in 5 + 5 + 2, then 4
  const std::string w(reinterpret_cast<const char*>(wire.data()), 24),
      b(reinterpret_cast<const char*>(wire.data() + 12), 8);
  for (size_t c1 = 0; c1 <= w.size(); ++c1) {
    ChunkAssembler a(&layout, {}, v1::WIRE_DTYPE_BF16);
    REQUIRE(a.Add(ChunkView{"w", {3, 4}, 0, Cut(w, {c1, c1 + 1, c1 + 3}), 24}).ok());
    REQUIRE(a.Add(ChunkView{"b", {4}, 0, Cut(b, {c1 % 8}), 8}).ok());
    REQUIRE(a.all_finite());
    REQUIRE(a.bytes_received() == 32);
    auto out = a.Finish();
    REQUIRE(out.ok());
    REQUIRE(*out == flat);
  }
  std::vector<uint16_t> bad = {ToBfloat16(1.0f), ToBfloat16(INFINITY), ToBfloat16(2.0f), ToBfloat16(3.0f)};
  ChunkAssembler a(&layout, {}, v1::WIRE_DTYPE_BF16);
  REQUIRE(a.Add(ChunkView{"b", {4}, 0, Cut(std::string(reinterpret_cast<const char*>(bad.data()), 8), {3}), 8}).ok());
  CHECK_FALSE(a.all_finite());
  // Odd bytes are not whole bfloat16 values.
  ChunkAssembler odd(&layout, {}, v1::WIRE_DTYPE_BF16);
  absl::Status s = odd.Add(ChunkView{"b", {4}, 0, {absl::string_view("abc")}, 3});
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(s.message(), "whole bfloat16 values"));
}

}  // namespace
}  // namespace omnilearn
