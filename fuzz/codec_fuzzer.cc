// The chunk codec and layout parsing on hostile bytes: first a message for the in-place
// chunk reader, cut in two pieces, against protobuf (whenever the reader takes it,
// protobuf parses it to the same chunk); then a ModelLayout proto, then TensorChunk
// protos fed to a ChunkAssembler. Whatever the input: no crash, no leak, no undefined
// behaviour; a model that assembles completely re-chunks to the same bytes.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/tensor_codec.h"
#include "fuzz/fuzz_input.h"
#include "proto/omnilearn.pb.h"

namespace {

void CheckInPlaceReader(const std::string& bytes, size_t cut) {
  cut = std::min(cut, bytes.size());
  const absl::string_view all(bytes);
  omnilearn::ChunkView view;
  if (!omnilearn::ParseChunkEnvelope({all.substr(0, cut), all.substr(cut)}, 2, &view)) return;
  omnilearn::v1::PushRequest parsed;
  if (!parsed.ParseFromString(bytes) || !parsed.has_chunk()) __builtin_trap();
  const omnilearn::v1::TensorChunk& c = parsed.chunk();
  std::string data;
  for (absl::string_view p : view.data) data.append(p.data(), p.size());
  if (view.name != c.name() || view.offset != c.offset() || data != c.data() ||
      static_cast<int64_t>(data.size()) != view.data_bytes ||
      view.shape != std::vector<int64_t>(c.shape().begin(), c.shape().end())) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omnilearn::fuzz::FuzzInput in(data, size);
  {
    const size_t cut = in.Byte();
    CheckInPlaceReader(in.Bytes(), cut);
  }
  omnilearn::v1::ModelLayout proto;
  if (!proto.ParseFromString(in.Bytes())) return 0;
  absl::StatusOr<omnilearn::ModelLayout> layout = omnilearn::ParseLayout(proto);
  // The service refuses models past --max_model_bytes before allocating (CheckJoinHeader).
  if (!layout.ok() || layout->total_elements() > (1 << 20)) return 0;
  // The chunks as a float32 push and, by the input's choice, as a bfloat16 one.
  const auto dtype = in.Byte() % 2 ? omnilearn::v1::WIRE_DTYPE_BF16 : omnilearn::v1::WIRE_DTYPE_F32;
  omnilearn::ChunkAssembler assembler(&*layout, {}, dtype);
  while (!in.empty()) {
    omnilearn::v1::TensorChunk chunk;
    if (!chunk.ParseFromString(in.Bytes())) continue;
    if (!assembler.Add(chunk).ok()) break;  // the service stops at the first bad chunk
  }
  absl::StatusOr<std::vector<float>> flat = assembler.Finish();
  if (!flat.ok() || dtype != omnilearn::v1::WIRE_DTYPE_F32) return 0;
  // A complete model: chunking it again and assembling gives the same bytes.
  omnilearn::ChunkAssembler again(&*layout);
  omnilearn::ForEachChunk(*layout, flat->data(), 64, [&](omnilearn::v1::TensorChunk& c) {
    if (!again.Add(c).ok()) __builtin_trap();
    return true;
  });
  absl::StatusOr<std::vector<float>> back = again.Finish();
  if (!back.ok() || back->size() != flat->size() ||
      (!flat->empty() && std::memcmp(back->data(), flat->data(), flat->size() * sizeof(float)) != 0)) {
    __builtin_trap();
  }
  return 0;
}
