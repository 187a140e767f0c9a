// The receiving side of the calls that bring a model (Pull, PushPull): a model written in
// place into the worker's weights as its chunks arrive, and what a PushPull's response
// stream came to. No network of its own: it reads whatever stream it is given.
#ifndef OMNILEARN_WORKER_CLIENT_MODEL_RECEIVER_H_
#define OMNILEARN_WORKER_CLIENT_MODEL_RECEIVER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/grpc_chunks.h"
#include "common/model_layout.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.pb.h"
#include "worker/client/ps_types.h"

namespace omnilearn {
namespace worker {

// A PushPull stream, the network's (grpc::ClientReaderWriter) or a test's.
using RawStream = grpc::ClientReaderWriterInterface<grpc::ByteBuffer, grpc::ByteBuffer>;

// A gRPC status as an absl one, the call named in its message.
absl::Status FromGrpc(const grpc::Status& s, const char* call);

// Receives a model as Pull and PushPull send it: a PullHeader, then (unless up to date)
// the chunks, written in place into the worker's weights as they arrive (no staging
// copy: Python workers receive straight into their parameters' storage).
class ModelReceiver {
 public:
  ModelReceiver(const ModelLayout* layout, absl::Span<float> weights) : layout_(layout), weights_(weights) {}

  void Header(const v1::PullHeader& h);
  void Chunk(const ChunkView& c);
  bool has_header() const { return got_header_; }
  uint64_t version() const { return version_; }  // the header's
  // Tensor t has all its values (always, when no values are due).
  bool TensorComplete(int t) const { return !assembler_ || assembler_->tensor_complete(t); }
  void Fail(absl::Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  // After the stream ended well: the version (when a header came) once every value
  // arrived.
  absl::Status Finish(uint64_t* version);

 private:
  const ModelLayout* layout_;
  absl::Span<float> weights_;
  std::optional<ChunkAssembler> assembler_;
  absl::Status status_;
  uint64_t version_ = 0;
  bool got_header_ = false;
};

// Reads a model stream (Pull's, PushPull's) into `model` until it ends or `enough()`;
// `other` gets every message that is neither a chunk nor the model's header (PushPull's
// reply).
template <typename Envelope, typename Reader, typename Other>
void ReadModel(
    Reader* reader, int chunk_field, ModelReceiver* model, Other other,
    const std::function<bool()>& enough = [] { return false; }) {
  grpc::ByteBuffer buffer;
  ReceivedMessage<Envelope> msg;
  while (!enough() && reader->Read(&buffer)) {
    if (absl::Status p = msg.Parse(buffer, chunk_field); !p.ok()) {
      model->Fail(p);
    } else if (msg.is_chunk()) {
      model->Chunk(msg.chunk());
    } else if (msg.message().has_header()) {
      model->Header(msg.message().header());
    } else {
      other(msg.message());
    }
  }
}

// What a PushPull's response stream brought: the call's status, the reply, and whether
// the model (written in place) arrived whole.
struct PushPullReceipt {
  grpc::Status status;
  std::optional<v1::PushResponse> reply;
  absl::Status model;
};

// Reads a PushPull's responses to their end: the reply, and the model into `weights`.
PushPullReceipt ReceivePushPull(RawStream* stream, const ModelLayout& layout, absl::Span<float> weights,
                                uint64_t* model_version);

// The reply, or what went wrong: the call's error (a server without PushPull named as
// such), no reply, or a model that did not arrive whole.
absl::StatusOr<v1::PushResponse> ReplyOf(const PushPullReceipt& r);

// The reply in the worker's terms, or the call's error.
absl::StatusOr<PushReply> ReplyOrError(const absl::StatusOr<v1::PushResponse>& r);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_MODEL_RECEIVER_H_
