#include "worker/client/grpc_push_stream.h"

#include "common/grpc_chunks.h"
#include "common/tensor_codec.h"
#include "worker/client/ps_proto.h"
#include "worker/client/timeline.h"

namespace omnilearn {
namespace worker {

void Bfloat16Feedback::Encode(const float* gradient, int64_t at, int64_t n, int64_t total, uint16_t* out) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int64_t>(residual_.size()) != total) residual_.assign(total, 0.0f);
  EncodeBfloat16(gradient + at, n, out + at, residual_.data() + at);
}

GrpcPushStream::GrpcPushStream(v1::PushHeader header, const ModelLayout& layout, absl::Span<const float> gradient,
                               Bfloat16Feedback* feedback, const std::function<void(grpc::ClientContext*)>& prepare,
                               const Open& open)
    : header_(std::move(header)), layout_(layout), gradient_(gradient), feedback_(feedback) {
  if (header_.wire_dtype() == v1::WIRE_DTYPE_BF16) encoded_.resize(gradient_.size());
  prepare(&ctx_);
  stream_ = open(&ctx_);
  writer_ = std::thread([this] { WriteLoop(); });
}

GrpcPushStream::~GrpcPushStream() {
  if (reader_.joinable()) {  // a model still arriving: given up
    ctx_.TryCancel();
    reader_.join();
  }
  if (finished_) return;
  ctx_.TryCancel();  // the server drops a push it did not read whole
  StopWriter(/*cancel=*/true);
  (void)stream_->Finish();
}

void GrpcPushStream::Send(const std::vector<int>& tensors) {
  absl::MutexLock lock(&mu_);
  queue_.insert(queue_.end(), tensors.begin(), tensors.end());
}

void GrpcPushStream::CloseWrites(const StepEnd& end) {
  if (writes_closed_) return;
  {
    absl::MutexLock lock(&mu_);
    trailer_ = TrailerOf(end);
  }
  StopWriter(/*cancel=*/false);
  writes_closed_ = true;
}

absl::StatusOr<PushReply> GrpcPushStream::FinishEarly(const StepEnd& end, uint64_t* model_version,
                                                      absl::Span<float> weights) {
  CloseWrites(end);
  finished_ = true;
  absl::ReleasableMutexLock lock(&mu_);  // no reader yet: taken for the annotations' sake
  receiver_.emplace(&layout_, weights);
  // The reply, then the model's header; the chunks follow in the background.
  std::optional<v1::PushResponse> reply;
  ModelReceiver* model = &*receiver_;
  ReadModel<v1::PushPullResponse>(
      stream_.get(), kPushPullResponseChunkField, model,
      [&](const v1::PushPullResponse& m) {
        if (m.has_reply()) reply = m.reply();
      },
      [&] { return reply && model->has_header(); });
  const bool header = model->has_header();
  if (header) *model_version = model->version();
  if (!(reply && header)) {  // the call ended first: an error, or a reply without a model
    PushPullReceipt receipt{stream_->Finish(), reply, absl::OkStatus()};
    if (receipt.status.ok() && reply) receipt.model = receiver_->Finish(model_version);
    done_ = true;
    result_ = receipt.status.ok() ? receipt.model : FromGrpc(receipt.status, "PushPull");
    return ReplyOrError(ReplyOf(receipt));
  }
  lock.Release();
  reader_ = std::thread([this] { ReadRest(); });
  return PushReplyOf(*reply);
}

bool GrpcPushStream::AwaitTensor(int t) {
  absl::MutexLock lock(&mu_);
  auto arrived = [this, t]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ || receiver_->TensorComplete(t); };
  mu_.Await(absl::Condition(&arrived));
  return receiver_->TensorComplete(t);
}

absl::Status GrpcPushStream::AwaitModel() {
  if (reader_.joinable()) reader_.join();
  absl::MutexLock lock(&mu_);
  return result_;
}

void GrpcPushStream::StopWriter(bool cancel) {
  {
    absl::MutexLock lock(&mu_);
    (cancel ? cancelled_ : closing_) = true;
  }
  if (writer_.joinable()) writer_.join();  // not after CloseWrites
}

// The model's chunks after FinishEarly, into the weights in place, then the call's end.
void GrpcPushStream::ReadRest() {
  grpc::ByteBuffer buffer;
  ReceivedMessage<v1::PushPullResponse> msg;
  while (stream_->Read(&buffer)) {
    absl::MutexLock lock(&mu_);  // AwaitTensor reads the progress
    if (absl::Status p = msg.Parse(buffer, kPushPullResponseChunkField); !p.ok()) {
      receiver_->Fail(p);
    } else if (msg.is_chunk()) {
      receiver_->Chunk(msg.chunk());
    } else {
      receiver_->Fail(absl::InvalidArgumentError("PushPull: a message after the model's header"));
    }
  }
  const grpc::Status s = stream_->Finish();
  absl::MutexLock lock(&mu_);
  uint64_t version = 0;
  result_ = s.ok() ? receiver_->Finish(&version) : FromGrpc(s, "PushPull");
  done_ = true;
  Timeline::Process().Mark("model_in");
}

// The header, each queued tensor once as it comes, and at the close everything else
// (whatever got no gradient), then the trailer. Nothing more once cancelled.
void GrpcPushStream::WriteLoop() {
  std::vector<bool> sent(layout_.tensors().size(), false);
  v1::PushTrailer trailer;
  v1::PushRequest msg;
  *msg.mutable_header() = header_;
  bool ok = stream_->Write(Serialize(msg));
  while (true) {
    std::vector<int> batch;
    bool closing = false;
    {
      absl::MutexLock lock(&mu_);
      auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closing_ || cancelled_; };
      mu_.Await(absl::Condition(&wake));
      if (cancelled_) return;
      batch.swap(queue_);
      closing = closing_;
      trailer = trailer_;
    }
    if (closing) {
      for (int t = static_cast<int>(sent.size()) - 1; t >= 0; --t) batch.push_back(t);
    }
    for (int t : batch) {
      if (t < 0 || t >= static_cast<int>(sent.size()) || sent[t]) continue;
      sent[t] = true;
      ok = ok && WriteTensor(t);
    }
    if (closing) break;
  }
  msg.Clear();
  *msg.mutable_trailer() = trailer;
  if (ok) ok = stream_->Write(Serialize(msg));
  stream_->WritesDone();
  Timeline::Process().Mark("written");
}

bool GrpcPushStream::WriteTensor(int t) {
  auto write = [this](const grpc::ByteBuffer& b) { return stream_->Write(b); };
  if (header_.wire_dtype() != v1::WIRE_DTYPE_BF16) {
    return ForEachChunkBufferOf(kPushRequestChunkField, layout_, t, gradient_.data(), write);
  }
  feedback_->Encode(gradient_.data(), layout_.offset(t), layout_.size(t), static_cast<int64_t>(gradient_.size()),
                    encoded_.data());
  return ForEachChunkBufferOf(kPushRequestChunkField, layout_, t, encoded_.data(), write, sizeof(uint16_t));
}

}  // namespace worker
}  // namespace omnilearn
