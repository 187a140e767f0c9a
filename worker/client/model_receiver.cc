#include "worker/client/model_receiver.h"

#include "absl/strings/str_cat.h"
#include "worker/client/ps_proto.h"

namespace omnilearn {
namespace worker {

absl::Status FromGrpc(const grpc::Status& s, const char* call) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(call, ": ", s.error_message()));
}

void ModelReceiver::Header(const v1::PullHeader& h) {
  version_ = h.model_version();
  got_header_ = true;
  if (h.up_to_date()) return;
  if (static_cast<int64_t>(weights_.size()) != layout_->total_elements()) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("a model of ", layout_->total_elements(), " values into a buffer of ", weights_.size())));
    return;
  }
  assembler_.emplace(layout_, ChunkAssembler::InPlace(weights_.data()), h.wire_dtype());
}

void ModelReceiver::Chunk(const ChunkView& c) {
  if (!status_.ok()) return;
  status_ = assembler_ ? assembler_->Add(c) : absl::InvalidArgumentError("a model chunk before the model's header");
}

absl::Status ModelReceiver::Finish(uint64_t* version) {
  if (!status_.ok()) return status_;
  if (assembler_) {
    if (absl::Status s = assembler_->CheckComplete(); !s.ok()) return s;
  }
  if (got_header_) *version = version_;
  return absl::OkStatus();
}

PushPullReceipt ReceivePushPull(RawStream* stream, const ModelLayout& layout, absl::Span<float> weights,
                                uint64_t* model_version) {
  PushPullReceipt out;
  ModelReceiver model(&layout, weights);
  ReadModel<v1::PushPullResponse>(stream, kPushPullResponseChunkField, &model, [&](const v1::PushPullResponse& m) {
    if (m.has_reply()) out.reply = m.reply();
  });
  out.status = stream->Finish();
  if (out.status.ok() && out.reply) out.model = model.Finish(model_version);
  return out;
}

absl::StatusOr<v1::PushResponse> ReplyOf(const PushPullReceipt& r) {
  if (r.status.error_code() == grpc::StatusCode::UNIMPLEMENTED && !r.reply) {
    return absl::FailedPreconditionError(
        "the server does not serve PushPull: it is of a release older than this worker's, upgrade it");
  }
  if (!r.status.ok()) return FromGrpc(r.status, "PushPull");
  if (!r.reply) return absl::InternalError("PushPull: the server sent no reply");
  if (!r.model.ok()) return r.model;
  return *r.reply;
}

absl::StatusOr<PushReply> ReplyOrError(const absl::StatusOr<v1::PushResponse>& r) {
  if (!r.ok()) return r.status();
  return PushReplyOf(*r);
}

}  // namespace worker
}  // namespace omnilearn
