// Chunk messages as gRPC byte buffers, without protobuf copies of the payload: a model
// or gradient goes from where it lies to the transport, and from gRPC's received slices
// straight into its destination. The gRPC edge of tensor_codec's ChunkPrefix and
// ParseChunkEnvelope; every other message goes through protobuf as usual.
#ifndef OMNILEARN_COMMON_GRPC_CHUNKS_H_
#define OMNILEARN_COMMON_GRPC_CHUNKS_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model_layout.h"
#include "common/tensor_codec.h"

namespace omnilearn {

// The chunk envelopes' field numbers (proto/omnilearn.proto).
inline constexpr int kJoinRequestChunkField = 2;
inline constexpr int kPushRequestChunkField = 2;
inline constexpr int kPullResponseChunkField = 2;
inline constexpr int kPushPullResponseChunkField = 3;

// One envelope message holding the chunk `spec`[offset, offset + n) whose n values of
// `value_bytes` each are at `data`. The payload is not copied: with an `owner`, gRPC's
// slice keeps a reference to it until the transport is done; without one, the caller
// keeps the values alive and unchanged until the call has ended (a synchronous call's
// Finish).
grpc::ByteBuffer ChunkBuffer(int field, const TensorSpec& spec, int64_t offset, const void* data, int64_t n,
                             int value_bytes, const std::shared_ptr<const void>& owner);

// Calls `emit` with each chunk of `values` (as ForEachChunkOf cuts them: float32 by
// default, bfloat16 with value_bytes 2) as a ByteBuffer. False when emit returned false.
bool ForEachChunkBuffer(int field, const ModelLayout& layout, const void* values,
                        const std::shared_ptr<const void>& owner,
                        const std::function<bool(const grpc::ByteBuffer&)>& emit, int value_bytes = 4);

// The same with the tensors in `order` (layout indices: ModelLayout::SendOrder's).
bool ForEachChunkBufferInOrder(int field, const ModelLayout& layout, const std::vector<int>& order, const void* values,
                               const std::shared_ptr<const void>& owner,
                               const std::function<bool(const grpc::ByteBuffer&)>& emit, int value_bytes = 4);

// The same for the layout's tensor `tensor` only, without an owner.
bool ForEachChunkBufferOf(int field, const ModelLayout& layout, int tensor, const void* values,
                          const std::function<bool(const grpc::ByteBuffer&)>& emit, int value_bytes = 4);
// A protobuf message as a ByteBuffer (for the non-chunk messages of a raw stream).
template <typename Message>
grpc::ByteBuffer Serialize(const Message& m) {
  grpc::ByteBuffer out;
  bool own = false;
  grpc::SerializationTraits<Message>::Serialize(m, &out, &own);
  return out;
}

// One received envelope message: a chunk, read in place, or any other message, parsed
// by protobuf into `Envelope`.
template <typename Envelope>
class ReceivedMessage {
 public:
  // InvalidArgument when the bytes are not an `Envelope`. `field` is its chunk's.
  absl::Status Parse(const grpc::ByteBuffer& buffer, int field) {
    slices_.clear();
    chunk_ = false;
    if (!buffer.Dump(&slices_).ok()) return absl::InvalidArgumentError("unreadable message");
    std::vector<absl::string_view> pieces;
    pieces.reserve(slices_.size());
    for (const grpc::Slice& s : slices_) pieces.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
    if (ParseChunkEnvelope(pieces, field, &view_)) {
      chunk_ = true;
      message_.Clear();
      return absl::OkStatus();
    }
    std::string flat;
    for (absl::string_view p : pieces) flat.append(p.data(), p.size());
    if (!message_.ParseFromString(flat)) return absl::InvalidArgumentError("malformed message");
    if (message_.has_chunk()) {
      chunk_ = true;
      view_ = ViewOf(message_.chunk());
    }
    return absl::OkStatus();
  }
  // A chunk (read in place, or parsed by protobuf): valid until the next Parse.
  bool is_chunk() const { return chunk_; }
  const ChunkView& chunk() const { return view_; }
  // Any other message (when !is_chunk()).
  const Envelope& message() const { return message_; }

 private:
  std::vector<grpc::Slice> slices_;
  bool chunk_ = false;
  ChunkView view_;
  Envelope message_;
};

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_GRPC_CHUNKS_H_
