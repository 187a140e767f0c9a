#include "common/tensor_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian float32");
static_assert(std::size(omnilearn::kTensorDtypes) == omnilearn::v1::TensorDtype_ARRAYSIZE, "one name per TensorDtype");

namespace omnilearn {

absl::StatusOr<ModelLayout> ParseLayout(const v1::ModelLayout& proto) {
  std::vector<TensorSpec> specs;
  for (const v1::TensorSpec& t : proto.tensors()) {
    const int dtype = static_cast<int>(t.dtype());
    if (dtype < 0 || dtype >= static_cast<int>(std::size(kTensorDtypes))) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name(), "' has an unknown dtype ", dtype));
    }
    specs.push_back(
        TensorSpec{t.name(), {t.shape().begin(), t.shape().end()}, t.buffer(), std::string(kTensorDtypes[dtype].name)});
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
    const auto dtype = std::find_if(std::begin(kTensorDtypes), std::end(kTensorDtypes),
                                    [&](const TensorDtype& d) { return d.name == t.dtype; });
    s->set_dtype(static_cast<v1::TensorDtype>(dtype - std::begin(kTensorDtypes)));  // Create checked it
  }
  return out;
}

int WireValueBytes(v1::WireDtype dtype) { return dtype == v1::WIRE_DTYPE_BF16 ? 2 : 4; }

const char* WireDtypeName(v1::WireDtype dtype) { return dtype == v1::WIRE_DTYPE_BF16 ? "bfloat16" : "float32"; }

void EncodeBfloat16(const float* __restrict src, int64_t n, uint16_t* __restrict dst, float* __restrict residual) {
  if (residual == nullptr) {
    for (int64_t i = 0; i < n; ++i) dst[i] = ToBfloat16(src[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float want = src[i] + residual[i];
    dst[i] = ToBfloat16(want);
    residual[i] = want - FromBfloat16(dst[i]);
  }
}

// CopyFinite's loop (below) for 2-byte values: kept apart so each vectorizes.
bool CopyFiniteBfloat16(float* __restrict dst, const void* __restrict src, int64_t n) {
  const char* s = static_cast<const char*>(src);
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint16_t half;
    std::memcpy(&half, s + i * sizeof(half), sizeof(half));
    bad |= static_cast<uint32_t>((half & 0x7f80u) == 0x7f80u);
    const uint32_t bits = static_cast<uint32_t>(half) << 16;
    std::memcpy(dst + i, &bits, sizeof(bits));
  }
  return bad == 0;
}

bool ForEachChunkOfTensor(const ModelLayout& layout, int tensor, const void* values, int value_bytes,
                          int64_t max_chunk_bytes,
                          const std::function<bool(const TensorSpec&, int64_t, const void*, int64_t)>& emit) {
  const int64_t per_chunk = std::max<int64_t>(1, max_chunk_bytes / value_bytes);
  const int64_t size = layout.size(tensor);
  const char* base = static_cast<const char*>(values) + layout.offset(tensor) * value_bytes;
  int64_t off = 0;
  do {  // a zero-sized tensor still sends one (empty) chunk, so it is named
    const int64_t n = std::min(per_chunk, size - off);
    if (!emit(layout.tensors()[tensor], off, base + off * value_bytes, n)) return false;
    off += n;
  } while (off < size);
  return true;
}

bool ForEachChunkOf(const ModelLayout& layout, const void* values, int value_bytes, int64_t max_chunk_bytes,
                    const std::function<bool(const TensorSpec&, int64_t, const void*, int64_t)>& emit) {
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    if (!ForEachChunkOfTensor(layout, static_cast<int>(i), values, value_bytes, max_chunk_bytes, emit)) return false;
  }
  return true;
}

bool ForEachChunkSpan(const ModelLayout& layout, const float* flat, int64_t max_chunk_bytes,
                      const std::function<bool(const TensorSpec&, int64_t, const float*, int64_t)>& emit) {
  return ForEachChunkOf(layout, flat, sizeof(float), max_chunk_bytes,
                        [&](const TensorSpec& spec, int64_t off, const void* data, int64_t n) {
                          return emit(spec, off, static_cast<const float*>(data), n);
                        });
}

bool ForEachChunk(const ModelLayout& layout, const float* flat, int64_t max_chunk_bytes,
                  const std::function<bool(v1::TensorChunk&)>& emit) {
  return ForEachChunkSpan(layout, flat, max_chunk_bytes,
                          [&](const TensorSpec& spec, int64_t off, const float* data, int64_t n) {
                            v1::TensorChunk chunk;
                            chunk.set_name(spec.name);
                            for (int64_t d : spec.shape) chunk.add_shape(d);
                            chunk.set_offset(off);
                            chunk.mutable_data()->assign(reinterpret_cast<const char*>(data), n * sizeof(float));
                            return emit(chunk);
                          });
}

ChunkView ViewOf(const v1::TensorChunk& chunk) {
  ChunkView v;
  v.name = chunk.name();
  v.shape.assign(chunk.shape().begin(), chunk.shape().end());
  v.offset = chunk.offset();
  v.data.push_back(chunk.data());
  v.data_bytes = static_cast<int64_t>(chunk.data().size());
  return v;
}

namespace {

// Protobuf's wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutTag(uint32_t field, uint32_t wire_type, std::string* out) { PutVarint(field << 3 | wire_type, out); }

// Reads bytes across a message's pieces (gRPC's slices), bounded by `limit`.
class PieceReader {
 public:
  explicit PieceReader(const std::vector<absl::string_view>& pieces) : pieces_(pieces) {
    for (absl::string_view p : pieces) limit_ += p.size();
    Settle();
  }
  uint64_t pos() const { return pos_; }
  uint64_t limit() const { return limit_; }
  bool at_limit() const { return pos_ == limit_; }
  // Bounds reading to the next n bytes; false when fewer are left.
  bool Narrow(uint64_t n) {
    if (n > limit_ - pos_) return false;
    limit_ = pos_ + n;
    return true;
  }
  // Lifts a Narrow back to `limit` (the one before it).
  void Widen(uint64_t limit) { limit_ = limit; }
  // A varint of at most 10 bytes whose 10th byte holds only the 64th bit (what every
  // encoder writes); false on anything else.
  bool Varint(uint64_t* v) { return VarintOf(10, v); }
  // A tag or a length: protobuf reads at most 5 bytes of those (a longer encoding, even of
  // a small value, fails its parse), so this reader takes no more either.
  bool Short(uint64_t* v) { return VarintOf(5, v); }
  // The next n bytes, as views into the pieces; false when fewer are left.
  bool Views(uint64_t n, std::vector<absl::string_view>* out) {
    if (n > limit_ - pos_) return false;
    while (n > 0) {
      const absl::string_view p = pieces_[piece_].substr(in_piece_, n);
      out->push_back(p);
      Advance(p.size());
      n -= p.size();
    }
    return true;
  }
  bool Skip(uint64_t n) {
    if (n > limit_ - pos_) return false;
    while (n > 0) {
      const uint64_t step = std::min<uint64_t>(n, pieces_[piece_].size() - in_piece_);
      Advance(step);
      n -= step;
    }
    return true;
  }

 private:
  bool VarintOf(int max_bytes, uint64_t* v) {
    *v = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (at_limit()) return false;
      const uint8_t b = static_cast<uint8_t>(pieces_[piece_][in_piece_]);
      Advance(1);
      if (i == 9 && b > 1) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if (b < 0x80) return true;
    }
    return false;
  }
  void Advance(uint64_t n) {
    in_piece_ += n;
    pos_ += n;
    Settle();
  }
  void Settle() {  // onto the next non-empty piece
    while (piece_ < pieces_.size() && in_piece_ == pieces_[piece_].size()) {
      ++piece_;
      in_piece_ = 0;
    }
  }

  const std::vector<absl::string_view>& pieces_;
  size_t piece_ = 0;
  uint64_t in_piece_ = 0, pos_ = 0, limit_ = 0;
};

// A field's tag: false for what protobuf would not take as one (field 0, a tag past 32
// bits) and for groups, which this reader leaves to protobuf.
bool Tag(PieceReader& r, uint32_t* field, uint32_t* wire_type) {
  uint64_t tag;
  if (!r.Short(&tag) || tag > 0xffffffffu) return false;
  *field = static_cast<uint32_t>(tag >> 3);
  *wire_type = static_cast<uint32_t>(tag & 7);
  return *field != 0 &&
         (*wire_type == kVarint || *wire_type == kFixed64 || *wire_type == kLen || *wire_type == kFixed32);
}

bool SkipField(PieceReader& r, uint32_t wire_type) {
  uint64_t v;
  switch (wire_type) {
    case kVarint:
      return r.Varint(&v);
    case kFixed64:
      return r.Skip(8);
    case kLen:
      return r.Short(&v) && r.Skip(v);
    case kFixed32:
      return r.Skip(4);
  }
  return false;
}

}  // namespace

std::string ChunkPrefix(int field, const std::string& name, const std::vector<int64_t>& shape, int64_t offset,
                        int64_t data_bytes) {
  std::string chunk;  // the TensorChunk's fields before its payload
  PutTag(1, kLen, &chunk);
  PutVarint(name.size(), &chunk);
  chunk += name;
  if (!shape.empty()) {
    std::string packed;
    for (int64_t d : shape) PutVarint(static_cast<uint64_t>(d), &packed);
    PutTag(2, kLen, &chunk);
    PutVarint(packed.size(), &chunk);
    chunk += packed;
  }
  if (offset != 0) {
    PutTag(3, kVarint, &chunk);
    PutVarint(static_cast<uint64_t>(offset), &chunk);
  }
  PutTag(4, kLen, &chunk);
  PutVarint(static_cast<uint64_t>(data_bytes), &chunk);
  std::string out;
  PutTag(static_cast<uint32_t>(field), kLen, &out);
  PutVarint(chunk.size() + static_cast<uint64_t>(data_bytes), &out);
  return out + chunk;
}

bool ParseChunkEnvelope(const std::vector<absl::string_view>& pieces, int field, ChunkView* out) {
  PieceReader r(pieces);
  uint32_t f, wt;
  uint64_t len;
  // Exactly one field, the chunk: its length runs to the message's end.
  if (!Tag(r, &f, &wt) || f != static_cast<uint32_t>(field) || wt != kLen || !r.Short(&len) ||
      len != r.limit() - r.pos()) {
    return false;
  }
  *out = ChunkView{};
  while (!r.at_limit()) {
    if (!Tag(r, &f, &wt)) return false;
    uint64_t v;
    if (f == 1 && wt == kLen) {  // name: the last one wins, as in protobuf
      std::vector<absl::string_view> parts;
      if (!r.Short(&v) || !r.Views(v, &parts)) return false;
      out->name.clear();
      for (absl::string_view p : parts) out->name.append(p.data(), p.size());
      for (char c : out->name) {
        if (static_cast<unsigned char>(c) >= 0x80) return false;  // protobuf checks UTF-8: let it
      }
    } else if (f == 2 && wt == kLen) {  // shape, packed
      const uint64_t outer = r.limit();
      if (!r.Short(&v) || !r.Narrow(v)) return false;
      while (!r.at_limit()) {
        uint64_t d;
        if (!r.Varint(&d)) return false;
        out->shape.push_back(static_cast<int64_t>(d));
      }
      r.Widen(outer);
    } else if (f == 2 && wt == kVarint) {  // shape, one value unpacked
      if (!r.Varint(&v)) return false;
      out->shape.push_back(static_cast<int64_t>(v));
    } else if (f == 3 && wt == kVarint) {
      if (!r.Varint(&v)) return false;
      out->offset = static_cast<int64_t>(v);
    } else if (f == 4 && wt == kLen) {  // the payload: the last one wins
      out->data.clear();
      if (!r.Short(&v) || !r.Views(v, &out->data)) return false;
      out->data_bytes = static_cast<int64_t>(v);
    } else if (f <= 4) {
      return false;  // a known field with another wire type: protobuf decides
    } else if (!SkipField(r, wt)) {
      return false;
    }
  }
  return true;
}

ChunkAssembler::ChunkAssembler(const ModelLayout* layout, std::vector<float> buffer, v1::WireDtype dtype)
    : layout_(layout), dtype_(dtype), flat_(std::move(buffer)), filled_(layout->tensors().size(), 0) {
  flat_.resize(layout->total_elements());
  out_ = flat_.data();
}

ChunkAssembler::ChunkAssembler(const ModelLayout* layout, InPlace target, v1::WireDtype dtype)
    : layout_(layout), dtype_(dtype), out_(target.target), filled_(layout->tensors().size(), 0) {}

absl::Status ChunkAssembler::Add(const ChunkView& chunk) {
  const int i = layout_->Find(chunk.name);
  if (i < 0) return absl::InvalidArgumentError(absl::StrCat("unknown tensor '", chunk.name, "'"));
  const TensorSpec& spec = layout_->tensors()[i];
  if (spec.shape != chunk.shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has shape [",
                                                   absl::StrJoin(chunk.shape, ","), "], expected [",
                                                   absl::StrJoin(spec.shape, ","), "]"));
  }
  if (chunk.data_bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of '", spec.name, "' exceeds ", kMaxChunkBytes, " bytes"));
  }
  const int vb = WireValueBytes(dtype_);
  if (chunk.data_bytes % vb != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk of '", spec.name, "' is not whole ", WireDtypeName(dtype_), " values"));
  }
  const int64_t n = chunk.data_bytes / vb;
  if (chunk.offset != filled_[i] || filled_[i] + n > layout_->size(i)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk of '", spec.name, "' at offset ", chunk.offset, " with ", n,
                                                   " values does not continue at ", filled_[i], " of ",
                                                   layout_->size(i)));
  }
  // The pieces may split a value anywhere and sit at any alignment: whole values are
  // decoded and checked in one pass, a value split between pieces once it is complete.
  auto decode = [this](float* to, const void* from, int64_t count) {
    return dtype_ == v1::WIRE_DTYPE_BF16 ? CopyFiniteBfloat16(to, from, count) : CopyFinite(to, from, count);
  };
  float* const dst = out_ + layout_->offset(i) + filled_[i];
  int64_t done = 0;  // values written to dst
  char carry[4];     // the start of a value split between pieces
  int carried = 0;
  bool finite = true;
  for (absl::string_view piece : chunk.data) {
    const char* p = piece.data();
    int64_t left = static_cast<int64_t>(piece.size());
    while (carried > 0 && left > 0) {
      carry[carried++] = *p++;
      --left;
      if (carried == vb) {
        finite &= decode(dst + done++, carry, 1);
        carried = 0;
      }
    }
    const int64_t whole = left / vb;
    finite &= decode(dst + done, p, whole);
    done += whole;
    for (int64_t k = whole * vb; k < left; ++k) carry[carried++] = p[k];
  }
  all_finite_ &= finite;
  filled_[i] += n;
  received_ += n;
  bytes_ += chunk.data_bytes;
  return absl::OkStatus();
}

absl::Status ChunkAssembler::CheckComplete() const {
  for (size_t i = 0; i < filled_.size(); ++i) {
    if (filled_[i] != layout_->size(i)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", layout_->tensors()[i].name, "' incomplete: ", filled_[i], " of ", layout_->size(i), " values"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ChunkAssembler::Finish() {
  if (absl::Status s = CheckComplete(); !s.ok()) return s;
  return std::move(flat_);
}

bool CopyFinite(float* __restrict dst, const void* __restrict src, int64_t n) {
  // A float is NaN or Inf when its exponent bits are all ones: OR-reduce a flag per lane
  // so the loop vectorizes (std::isfinite with an early exit does not). Loads go through
  // memcpy: `src` may sit at any alignment in a received buffer.
  const char* s = static_cast<const char*>(src);
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, s + i * sizeof(bits), sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    std::memcpy(dst + i, &bits, sizeof(bits));
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
