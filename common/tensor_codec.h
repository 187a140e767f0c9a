// Converts between the flat float32 model vector and the wire's TensorChunk messages.
#ifndef OMNILEARN_COMMON_TENSOR_CODEC_H_
#define OMNILEARN_COMMON_TENSOR_CODEC_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_layout.h"
#include "common/tensor_dtype.h"  // ToBfloat16, FromBfloat16
#include "proto/omnilearn.pb.h"

namespace omnilearn {

// Largest chunk payload: 4 MiB (the proto's contract).
inline constexpr int64_t kMaxChunkBytes = 4 << 20;
// Receive limit for one gRPC message: a chunk plus its envelope.
inline constexpr int kMaxMessageBytes = kMaxChunkBytes + (1 << 20);
// HTTP/2 flow-control window of one call, both ways: a call opened after compute (each
// push, each model) starts at full speed instead of waiting for gRPC to learn the link's
// bandwidth-delay product.
inline constexpr int kStreamWindowBytes = 16 << 20;
// gRPC keepalive of the connections workers open to servers, pinged from both ends: a ping
// after 5 s without a read, and the connection counted lost when it is not answered within
// 20 s (gRPC's own default): a host gone without closing its connections is noticed within
// 25 s. A ping waits behind the data queued on its link: 16 workers on 16 servers over
// 200 Mbit/s links saw pings unanswered for 5 s on live connections, and each such close
// made a worker join again and the job go back to its checkpoint (bench/scaling.py).
inline constexpr int kKeepaliveTimeMs = 5000;
inline constexpr int kKeepaliveTimeoutMs = 20000;
// Reconnects of a worker to its servers and of a shard to its coordinator: a server back
// (restarted, or its host's partition healed) is found again within a second or two, not
// after gRPC's default backoff of up to two minutes. gRPC reads the third as the time one
// connection attempt may take (TCP, TLS and the HTTP/2 SETTINGS), not as a backoff. At
// 100 ms, 16 workers on 16 servers over 200 Mbit/s links saw connects time out "before
// receiving SETTINGS frame" (a SYN dropped at a full queue is sent again after 1 s), and
// every such failure made the worker join again. 5 s takes two SYNs; a refused connect (a
// server down) still fails at once.
inline constexpr int kInitialReconnectBackoffMs = 100;  // GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS
inline constexpr int kMaxReconnectBackoffMs = 1000;     // GRPC_ARG_MAX_RECONNECT_BACKOFF_MS
inline constexpr int kConnectTimeoutMs = 5000;          // GRPC_ARG_MIN_RECONNECT_BACKOFF_MS

absl::StatusOr<ModelLayout> ParseLayout(const v1::ModelLayout& proto);
v1::ModelLayout LayoutToProto(const ModelLayout& layout);

// Bytes of one value on the wire: 4 (float32) or 2 (bfloat16).
int WireValueBytes(v1::WireDtype dtype);
const char* WireDtypeName(v1::WireDtype dtype);  // "float32", "bfloat16"

// Encodes n floats as bfloat16. With `residual` (n floats, kept by the caller from call to
// call): encodes src + residual and leaves in residual what the rounding lost (error
// feedback: over many steps the values sent add up to the values given).
void EncodeBfloat16(const float* src, int64_t n, uint16_t* dst, float* residual = nullptr);
// Decodes n bfloat16 values at `src` (any alignment) into dst; whether all were finite.
bool CopyFiniteBfloat16(float* dst, const void* src, int64_t n);

// Calls `emit` with each chunk of the layout's tensor `tensor` in `values`
// (layout.total_elements() values of `value_bytes` each, in layout order), each at most
// `max_chunk_bytes` of payload; `data` points at the chunk's first value. Stops at the
// first false from emit; returns false then.
bool ForEachChunkOfTensor(const ModelLayout& layout, int tensor, const void* values, int value_bytes,
                          int64_t max_chunk_bytes,
                          const std::function<bool(const TensorSpec&, int64_t, const void*, int64_t)>& emit);
// The same for every tensor, in layout order.
bool ForEachChunkOf(const ModelLayout& layout, const void* values, int value_bytes, int64_t max_chunk_bytes,
                    const std::function<bool(const TensorSpec&, int64_t, const void*, int64_t)>& emit);

// Calls `emit` with each chunk of `flat` (layout.total_elements() floats), in layout
// order, each at most `max_chunk_bytes` of payload. Stops at the first false from emit.
// Returns false when emit did.
bool ForEachChunk(const ModelLayout& layout, const float* flat, int64_t max_chunk_bytes,
                  const std::function<bool(v1::TensorChunk&)>& emit);

// The same chunks as ForEachChunk, without building messages: `emit(spec, offset, data, n)`
// gets each chunk's tensor, its first element's offset in the tensor and its n values.
bool ForEachChunkSpan(const ModelLayout& layout, const float* flat, int64_t max_chunk_bytes,
                      const std::function<bool(const TensorSpec&, int64_t, const float*, int64_t)>& emit);

// A TensorChunk as read off the wire without copying its payload: `data` are the pieces
// (in order) of the payload's bytes where they lie in the received buffers, which must
// outlive the view.
struct ChunkView {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  std::vector<absl::string_view> data;
  int64_t data_bytes = 0;  // the pieces' total
};
ChunkView ViewOf(const v1::TensorChunk& chunk);

// Hand-encoded chunk messages. An envelope message (PushRequest, PullResponse,
// PushPullResponse) holding only a TensorChunk as its field `field` is, on the wire,
// ChunkPrefix(...) followed by the payload's bytes: the payload can go to the transport
// from where it lies. Parsing the concatenation with protobuf gives the same message.
std::string ChunkPrefix(int field, const std::string& name, const std::vector<int64_t>& shape, int64_t offset,
                        int64_t data_bytes);

// Reads an envelope message (pieces of its wire bytes, in order) that holds only a
// TensorChunk as field `field`, without copying the payload. False when the message is
// anything else (another field, several, unknown or odd encodings, a name that is not
// ASCII, malformed bytes): the caller parses it with protobuf, which decides. When true,
// *out is what protobuf would have parsed.
bool ParseChunkEnvelope(const std::vector<absl::string_view>& pieces, int field, ChunkView* out);

// Rebuilds a flat float32 vector from chunks. Each tensor's chunks must come in order and
// cover it exactly once; names and shapes must match the layout.
// Thread-compatible.
class ChunkAssembler {
 public:
  // `buffer` (optional) is storage to reuse: resized to the layout, its contents
  // overwritten (a pooled buffer avoids allocating and faulting in pages per call).
  // `dtype`: how the chunks' values are encoded (decoded to float32 here).
  explicit ChunkAssembler(const ModelLayout* layout, std::vector<float> buffer = {},
                          v1::WireDtype dtype = v1::WIRE_DTYPE_F32);
  // Writes the values in place into `target` (layout.total_elements() floats, not
  // owned): a worker receives the model straight into its parameters. A stream that
  // fails part way leaves `target` partly written. Finish() then returns an empty vector.
  struct InPlace {
    explicit InPlace(float* t) : target(t) {}
    float* target;
  };
  ChunkAssembler(const ModelLayout* layout, InPlace target, v1::WireDtype dtype);
  ChunkAssembler(ChunkAssembler&&) = default;  // a copy would write into the original's buffer
  ChunkAssembler(const ChunkAssembler&) = delete;
  ChunkAssembler& operator=(const ChunkAssembler&) = delete;
  // InvalidArgument: unknown name, wrong shape, misplaced offset, ragged or
  // oversized payload.
  absl::Status Add(const ChunkView& chunk);
  absl::Status Add(const v1::TensorChunk& chunk) { return Add(ViewOf(chunk)); }
  // InvalidArgument when a tensor is incomplete. Moves the vector out.
  absl::StatusOr<std::vector<float>> Finish();
  // InvalidArgument when a tensor is incomplete.
  absl::Status CheckComplete() const;
  int64_t bytes_received() const { return bytes_; }
  // Whether every tensor has all its values.
  bool complete() const { return received_ == layout_->total_elements(); }
  // Whether tensor i (layout index) has all its values.
  bool tensor_complete(int i) const { return filled_[i] == layout_->size(i); }
  // Whether every value received so far is finite (checked while copying).
  bool all_finite() const { return all_finite_; }

 private:
  const ModelLayout* layout_;
  v1::WireDtype dtype_;
  std::vector<float> flat_;
  float* out_;                   // where values go: flat_.data() or the caller's target
  std::vector<int64_t> filled_;  // per tensor: elements received so far
  int64_t bytes_ = 0;
  int64_t received_ = 0;  // values
  bool all_finite_ = true;
};

// True when every value is finite.
bool AllFinite(const std::vector<float>& values);
// Copies n floats from `src` (any alignment) and says whether all were finite (one
// pass, vectorized).
bool CopyFinite(float* dst, const void* src, int64_t n);

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_TENSOR_CODEC_H_
