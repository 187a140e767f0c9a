#include "common/tensor_codec.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian float32");

namespace omnilearn {

absl::StatusOr<ModelLayout> ParseLayout(const v1::ModelLayout& proto) {
  std::vector<TensorSpec> specs;
  for (const v1::TensorSpec& t : proto.tensors()) {
    specs.push_back(TensorSpec{t.name(), {t.shape().begin(), t.shape().end()}, t.buffer()});
  }
  return ModelLayout::Create(std::move(specs));
}

v1::ModelLayout LayoutToProto(const ModelLayout& layout) {
  v1::ModelLayout out;
  for (const TensorSpec& t : layout.tensors()) {
    v1::TensorSpec* s = out.add_tensors();
    s->set_name(t.name);
    for (int64_t d : t.shape) s->add_shape(d);
    s->set_buffer(t.buffer);
  }
  return out;
}

bool ForEachChunk(const ModelLayout& layout, const float* flat, int64_t max_chunk_bytes,
                  const std::function<bool(v1::TensorChunk&)>& emit) {
  const int64_t per_chunk = std::max<int64_t>(1, max_chunk_bytes / static_cast<int64_t>(sizeof(float)));
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    const TensorSpec& spec = layout.tensors()[i];
    const int64_t size = layout.size(i);
    const float* base = flat + layout.offset(i);
    int64_t off = 0;
    do {  // a zero-sized tensor still sends one (empty) chunk, so it is named
      const int64_t n = std::min(per_chunk, size - off);
      v1::TensorChunk chunk;
      chunk.set_name(spec.name);
      for (int64_t d : spec.shape) chunk.add_shape(d);
      chunk.set_offset(off);
      chunk.mutable_data()->assign(reinterpret_cast<const char*>(base + off), n * sizeof(float));
      if (!emit(chunk)) return false;
      off += n;
    } while (off < size);
  }
  return true;
}

ChunkAssembler::ChunkAssembler(const ModelLayout* layout, std::vector<float> buffer)
    : layout_(layout), flat_(std::move(buffer)), filled_(layout->tensors().size(), 0) {
  flat_.resize(layout->total_elements());
}

absl::Status ChunkAssembler::Add(const v1::TensorChunk& chunk) {
  const int i = layout_->Find(chunk.name());
  if (i < 0) return absl::InvalidArgumentError(absl::StrCat("unknown tensor '", chunk.name(), "'"));
  const TensorSpec& spec = layout_->tensors()[i];
  if (!std::equal(spec.shape.begin(), spec.shape.end(), chunk.shape().begin(), chunk.shape().end())) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has shape [",
                                                   absl::StrJoin(chunk.shape(), ","), "], expected [",
                                                   absl::StrJoin(spec.shape, ","), "]"));
  }
  const std::string& data = chunk.data();
  if (static_cast<int64_t>(data.size()) > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of '", spec.name, "' exceeds ", kMaxChunkBytes, " bytes"));
  }
  if (data.size() % sizeof(float) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of '", spec.name, "' is not whole float32 values"));
  }
  const int64_t n = data.size() / sizeof(float);
  if (chunk.offset() != filled_[i] || filled_[i] + n > layout_->size(i)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of '", spec.name, "' at offset ", chunk.offset(), " with ",
                                                   n, " values does not continue at ", filled_[i], " of ",
                                                   layout_->size(i)));
  }
  // The payload may sit at any alignment in the message: read it as bytes.
  float* dst = flat_.data() + layout_->offset(i) + filled_[i];
  if (reinterpret_cast<uintptr_t>(data.data()) % alignof(float) == 0) {
    all_finite_ &= CopyFinite(dst, reinterpret_cast<const float*>(data.data()), n);
  } else {
    std::memcpy(dst, data.data(), data.size());
    for (int64_t k = 0; k < n; ++k) all_finite_ &= std::isfinite(dst[k]);
  }
  filled_[i] += n;
  received_ += n;
  bytes_ += data.size();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ChunkAssembler::Finish() {
  for (size_t i = 0; i < filled_.size(); ++i) {
    if (filled_[i] != layout_->size(i)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", layout_->tensors()[i].name, "' incomplete: ",
                                                     filled_[i], " of ", layout_->size(i), " values"));
    }
  }
  return std::move(flat_);
}

bool CopyFinite(float* __restrict dst, const float* __restrict src, int64_t n) {
  // A float is NaN or Inf when its exponent bits are all ones: OR-reduce a flag per lane
  // so the loop vectorizes (std::isfinite with an early exit does not).
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    dst[i] = src[i];
  }
  return bad == 0;
}

bool AllFinite(const std::vector<float>& values) {
  uint32_t bad = 0;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

}  // namespace omnilearn
