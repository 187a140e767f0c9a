#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_chunks.h"
#include "common/grpc_raw.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.grpc.pb.h"
#include "worker/ps_client.h"
#include "worker/ps_proto.h"
#include "worker/sharded_ps_client.h"

namespace omnilearn {
namespace worker {
namespace {

// The reply in the worker's terms, or the call's error.
absl::StatusOr<PushReply> ReplyOrError(const absl::StatusOr<v1::PushResponse>& r) {
  if (!r.ok()) return r.status();
  return PushReplyOf(*r);
}

absl::Status FromGrpc(const grpc::Status& s, const char* call) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(call, ": ", s.error_message()));
}

// The values a client stream carries after its header: the layout's values of
// `value_bytes` each at `data` (float32 or bfloat16), or none.
struct Payload {
  const void* data = nullptr;
  int value_bytes = sizeof(float);
};

// Writes a client stream's header (inside `Request`), then the payload (when there is one)
// as chunks (the envelope's field `chunk_field`), then closes the writing side. The chunks
// are sent from where the values lie: the caller keeps them unchanged until the call has
// ended.
template <typename Request, typename Header, typename Writer>
void WriteHeaderAndChunks(Writer* writer, const Header& header, int chunk_field, const ModelLayout& layout,
                          Payload payload) {
  Request msg;
  *msg.mutable_header() = header;
  if (writer->Write(Serialize(msg)) && payload.data != nullptr) {
    ForEachChunkBuffer(
        chunk_field, layout, payload.data, nullptr, [&](const grpc::ByteBuffer& b) { return writer->Write(b); },
        payload.value_bytes);
  }
  writer->WritesDone();
}

// InvalidArgument unless `values` is empty (nothing to send) or holds the whole model.
absl::Status CheckModelSize(absl::Span<const float> values, const ModelLayout& layout, const char* what) {
  if (values.empty() || static_cast<int64_t>(values.size()) == layout.total_elements()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " of ", values.size(), " values for a model of ", layout.total_elements()));
}

// The full name gRPC calls a method of the service by.
std::string MethodPath(const char* method) {
  return absl::StrCat("/", v1::ParameterServer::service_full_name(), "/", method);
}

// Receives a model as Pull and PushPull send it: a PullHeader, then (unless up to date)
// the chunks, written in place into the worker's weights as they arrive (no staging
// copy: Python workers receive straight into their parameters' storage).
class ModelReceiver {
 public:
  ModelReceiver(const ModelLayout* layout, absl::Span<float> weights) : layout_(layout), weights_(weights) {}

  void Header(const v1::PullHeader& h) {
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
  void Chunk(const ChunkView& c) {
    if (!status_.ok()) return;
    status_ = assembler_ ? assembler_->Add(c) : absl::InvalidArgumentError("a model chunk before the model's header");
  }
  bool has_header() const { return got_header_; }
  uint64_t version() const { return version_; }  // the header's
  // Tensor t has all its values (always, when no values are due).
  bool TensorComplete(int t) const { return !assembler_ || assembler_->tensor_complete(t); }
  void Fail(absl::Status s) {
    if (status_.ok()) status_ = std::move(s);
  }
  // After the stream ended well: the version (when a header came) once every value
  // arrived.
  absl::Status Finish(uint64_t* version) {
    if (!status_.ok()) return status_;
    if (assembler_) {
      if (absl::Status s = assembler_->CheckComplete(); !s.ok()) return s;
    }
    if (got_header_) *version = version_;
    return absl::OkStatus();
  }

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

using RawStream = raw::ClientStream;

// What a PushPull's response stream brought: the call's status, the reply, and whether
// the model (written in place) arrived whole.
struct PushPullReceipt {
  grpc::Status status;
  std::optional<v1::PushResponse> reply;
  absl::Status model;
};

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

class GrpcPushStream;

class GrpcPsClient : public PsClient {
 public:
  GrpcPsClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options)
      : channel_(channel),
        stub_(v1::ParameterServer::NewStub(channel)),
        join_method_(MethodPath("Join"), raw::Method::Kind::kClientStreaming, channel),
        pull_method_(MethodPath("Pull"), raw::Method::Kind::kServerStreaming, channel),
        push_method_(MethodPath("Push"), raw::Method::Kind::kClientStreaming, channel),
        push_pull_method_(MethodPath("PushPull"), raw::Method::Kind::kBidiStreaming, channel),
        timeout_(options.rpc_timeout),
        offer_bfloat16_(options.offer_bfloat16),
        authorization_(options.auth_token.empty() ? "" : absl::StrCat("Bearer ", options.auth_token)) {}

  absl::StatusOr<JoinReply> Join(const JoinRequest& request, const ModelLayout& layout,
                                 absl::Span<const float> initial) override {
    if (absl::Status s = CheckModelSize(initial, layout, "initial parameters"); !s.ok()) return s;
    absl::StatusOr<v1::JoinResponse> r = Upload<v1::JoinRequest, v1::JoinResponse>(
        "Join", join_method_, JoinHeaderOf(request, layout, offer_bfloat16_), kJoinRequestChunkField, layout,
        Payload{initial.empty() ? nullptr : initial.data(), sizeof(float)});
    if (r.ok()) {  // a new session: its wire dtype, and no rounding error carried over
      absl::MutexLock lock(&encode_mu_);
      wire_dtype_ = r->wire_dtype();
      residual_.clear();
    }
    if (!r.ok()) return r.status();
    return JoinReplyOf(*r);
  }

  absl::StatusOr<uint64_t> Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                absl::Span<float> weights) override {
    return PullAtLeast(worker_id, have_version, 0, layout, weights);
  }

  absl::StatusOr<uint64_t> PullAtLeast(uint64_t worker_id, uint64_t have_version, uint64_t min_version,
                                       const ModelLayout& layout, absl::Span<float> weights) override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::PullRequest request;
    request.set_worker_id(worker_id);
    request.set_have_version(have_version);
    request.set_min_version(min_version);
    request.set_session_secret(secret());
    request.set_wire_dtype(wire_dtype());
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader =
        pull_method_.OpenDownload(channel_.get(), &ctx, Serialize(request));
    ModelReceiver model(&layout, weights);
    ReadModel<v1::PullResponse>(reader.get(), kPullResponseChunkField, &model, [](const v1::PullResponse&) {});
    grpc::Status s = reader->Finish();
    if (!s.ok()) return FromGrpc(s, "Pull");
    uint64_t version = have_version;
    if (absl::Status r = model.Finish(&version); !r.ok()) return r;
    return version;
  }

  absl::StatusOr<PushReply> Push(const PushedStep& push, const ModelLayout& layout,
                                 absl::Span<const float> gradient) override {
    if (absl::Status s = CheckModelSize(gradient, layout, "a gradient"); !s.ok()) return s;
    absl::MutexLock lock(&encode_mu_);  // the encoded gradient stays put until the call ends
    const v1::PushHeader signed_header = Signed(PushHeaderOf(push));
    return ReplyOrError(Upload<v1::PushRequest, v1::PushResponse>(
        "Push", push_method_, signed_header, kPushRequestChunkField, layout, GradientOf(signed_header, gradient)));
  }

  absl::StatusOr<PushReply> PushPull(const PushedStep& push, const ModelLayout& layout,
                                     absl::Span<const float> gradient, uint64_t* model_version,
                                     absl::Span<float> weights) override {
    if (absl::Status s = CheckModelSize(gradient, layout, "a gradient"); !s.ok()) return s;
    grpc::ClientContext ctx;
    Prepare(&ctx);
    std::unique_ptr<RawStream> stream = OpenPushPull(&ctx);
    absl::MutexLock encode_lock(&encode_mu_);  // the encoded gradient stays put until the call ends
    const v1::PushHeader signed_header = Signed(PushHeaderOf(push));
    WriteHeaderAndChunks<v1::PushRequest>(stream.get(), signed_header, kPushRequestChunkField, layout,
                                          GradientOf(signed_header, gradient));
    return ReplyOrError(ReplyOf(ReceivePushPull(stream.get(), layout, weights, model_version)));
  }

  absl::StatusOr<std::unique_ptr<PushStream>> StartPushPull(const PushedStep& push, const ModelLayout& layout,
                                                            absl::Span<const float> gradient) override;

  absl::StatusOr<Action> Heartbeat(uint64_t worker_id) override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    // A heartbeat that cannot get through soon is of no use: the next one follows.
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::HeartbeatRequest request;
    request.set_worker_id(worker_id);
    request.set_session_secret(secret());
    v1::HeartbeatResponse response;
    grpc::Status s = stub_->Heartbeat(&ctx, request, &response);
    if (!s.ok()) return FromGrpc(s, "Heartbeat");
    return ActionOf(response.action());
  }

  void SetSessionSecret(const std::string& secret) override {
    absl::MutexLock lock(&secret_mu_);
    secret_ = secret;
  }

  absl::Status Leave(uint64_t worker_id, bool finished) override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::LeaveRequest request;
    request.set_finished(finished);
    request.set_worker_id(worker_id);
    request.set_session_secret(secret());
    v1::LeaveResponse response;
    return FromGrpc(stub_->Leave(&ctx, request, &response), "Leave");
  }

 private:
  friend class GrpcPushStream;

  std::unique_ptr<RawStream> OpenPushPull(grpc::ClientContext* ctx) const {
    return push_pull_method_.OpenBidi(channel_.get(), ctx);
  }

  std::string secret() const {
    absl::MutexLock lock(&secret_mu_);
    return secret_;
  }

  void SetSessionBfloat16(bool bfloat16) override {
    absl::MutexLock lock(&encode_mu_);
    wire_dtype_ = bfloat16 ? v1::WIRE_DTYPE_BF16 : v1::WIRE_DTYPE_F32;
    residual_.clear();  // a new session: no rounding error carried over
  }

  v1::WireDtype wire_dtype() const {
    absl::MutexLock lock(&encode_mu_);
    return wire_dtype_;
  }

  // The header as sent: the session's secret and wire dtype.
  v1::PushHeader Signed(const v1::PushHeader& header) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(encode_mu_) {
    v1::PushHeader h = header;
    h.set_session_secret(secret());
    h.set_wire_dtype(wire_dtype_);
    return h;
  }

  // A push's gradient as it goes on the wire, or none for an out-of-memory, report-only or
  // idle push. In bfloat16 with error feedback: what rounding lost of this gradient is added to
  // the next one, so the server's sum over steps loses nothing.
  Payload GradientOf(const v1::PushHeader& header, absl::Span<const float> gradient)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(encode_mu_) {
    if (header.out_of_memory() || header.report_only() || header.idle()) return Payload{};
    if (header.wire_dtype() != v1::WIRE_DTYPE_BF16) return Payload{gradient.data(), sizeof(float)};
    if (residual_.size() != gradient.size()) residual_.assign(gradient.size(), 0.0f);
    encoded_.resize(gradient.size());
    EncodeBfloat16(gradient.data(), static_cast<int64_t>(gradient.size()), encoded_.data(), residual_.data());
    return Payload{encoded_.data(), sizeof(uint16_t)};
  }

  void Prepare(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoSeconds(timeout_));
    if (!authorization_.empty()) ctx->AddMetadata(kAuthorizationKey, authorization_);
  }

  // A client-streamed call (Join, Push) over raw buffers: the header, then `values` (when
  // given) as chunks, then the server's one response.
  template <typename Request, typename Response, typename Header>
  absl::StatusOr<Response> Upload(const char* call, const raw::Method& method, const Header& header, int chunk_field,
                                  const ModelLayout& layout, Payload values) const {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    Response response;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer = method.OpenUpload(channel_.get(), &ctx, &response);
    WriteHeaderAndChunks<Request>(writer.get(), header, chunk_field, layout, values);
    grpc::Status s = writer->Finish();
    if (!s.ok()) return FromGrpc(s, call);
    return response;
  }

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;  // the calls without a model
  // Join, Pull, Push and PushPull over raw buffers (common/grpc_chunks.h): the same
  // methods and wire format as the stub's, without protobuf copies of the model.
  const raw::Method join_method_, pull_method_, push_method_, push_pull_method_;
  mutable absl::Mutex secret_mu_;
  std::string secret_ ABSL_GUARDED_BY(secret_mu_);  // the session's, sent with every call
  // The session's wire dtype and, in bfloat16, the encoded gradient being sent and the
  // rounding error carried to the next push. Held for a whole push.
  mutable absl::Mutex encode_mu_;
  v1::WireDtype wire_dtype_ ABSL_GUARDED_BY(encode_mu_) = v1::WIRE_DTYPE_F32;
  std::vector<uint16_t> encoded_ ABSL_GUARDED_BY(encode_mu_);
  std::vector<float> residual_ ABSL_GUARDED_BY(encode_mu_);
  const absl::Duration timeout_;
  const bool offer_bfloat16_;
  const std::string authorization_;
};

// A PushPull whose chunks a thread of its own writes while the caller (autograd's
// thread) only queues tensors: a slow link never holds up backward. The gradient is
// sent from where it lies (float32) or encoded tensor by tensor into this stream's own
// buffer (bfloat16, with the client's error feedback).
class GrpcPushStream : public PushStream {
 public:
  GrpcPushStream(GrpcPsClient* client, const v1::PushHeader& header, const ModelLayout& layout,
                 absl::Span<const float> gradient)
      : client_(client), layout_(layout), gradient_(gradient) {
    client_->Prepare(&ctx_);
    stream_ = client_->OpenPushPull(&ctx_);
    writer_ = std::thread([this, header] { WriteLoop(header); });
  }

  ~GrpcPushStream() override {
    if (reader_.joinable()) {  // a model still arriving: given up
      ctx_.TryCancel();
      reader_.join();
    }
    if (finished_) return;
    ctx_.TryCancel();  // the server drops a push it did not read whole
    StopWriter(/*cancel=*/true);
    (void)stream_->Finish();
  }

  void Send(const std::vector<int>& tensors) override {
    absl::MutexLock lock(&mu_);
    queue_.insert(queue_.end(), tensors.begin(), tensors.end());
  }

  absl::StatusOr<PushReply> FinishEarly(const StepEnd& end, uint64_t* model_version,
                                        absl::Span<float> weights) override {
    {
      absl::MutexLock lock(&mu_);
      trailer_ = TrailerOf(end);
    }
    StopWriter(/*cancel=*/false);
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

  bool AwaitTensor(int t) override {
    absl::MutexLock lock(&mu_);
    auto arrived = [this, t]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ || receiver_->TensorComplete(t); };
    mu_.Await(absl::Condition(&arrived));
    return receiver_->TensorComplete(t);
  }

  absl::Status AwaitModel() override {
    if (reader_.joinable()) reader_.join();
    absl::MutexLock lock(&mu_);
    return result_;
  }

 private:
  void StopWriter(bool cancel) {
    {
      absl::MutexLock lock(&mu_);
      (cancel ? cancelled_ : closing_) = true;
    }
    writer_.join();
  }

  // The model's chunks after FinishEarly, into the weights in place, then the call's end.
  void ReadRest() {
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
  }

  void WriteLoop(v1::PushHeader header) {
    std::vector<bool> sent(layout_.tensors().size(), false);
    v1::PushTrailer trailer;
    {
      absl::MutexLock lock(&client_->encode_mu_);
      header = client_->Signed(header);
      header.set_trailer(true);
      if (header.wire_dtype() == v1::WIRE_DTYPE_BF16) {
        encoded_.resize(gradient_.size());
        if (client_->residual_.size() != gradient_.size()) client_->residual_.assign(gradient_.size(), 0.0f);
      }
    }
    v1::PushRequest msg;
    *msg.mutable_header() = header;
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
      if (closing) {  // everything else, whatever got no gradient, then the trailer
        for (int t = static_cast<int>(sent.size()) - 1; t >= 0; --t) batch.push_back(t);
      }
      for (int t : batch) {
        if (t < 0 || t >= static_cast<int>(sent.size()) || sent[t]) continue;
        sent[t] = true;
        ok = ok && WriteTensor(header.wire_dtype(), t);
      }
      if (closing) break;
    }
    msg.Clear();
    *msg.mutable_trailer() = trailer;
    if (ok) ok = stream_->Write(Serialize(msg));
    stream_->WritesDone();
  }

  bool WriteTensor(v1::WireDtype dtype, int t) {
    auto write = [this](const grpc::ByteBuffer& b) { return stream_->Write(b); };
    if (dtype != v1::WIRE_DTYPE_BF16) {
      return ForEachChunkBufferOf(kPushRequestChunkField, layout_, t, gradient_.data(), write);
    }
    const int64_t at = layout_.offset(t), n = layout_.size(t);
    {
      absl::MutexLock lock(&client_->encode_mu_);  // the error feedback carried from push to push
      EncodeBfloat16(gradient_.data() + at, n, encoded_.data() + at, client_->residual_.data() + at);
    }
    return ForEachChunkBufferOf(kPushRequestChunkField, layout_, t, encoded_.data(), write, sizeof(uint16_t));
  }

  GrpcPsClient* const client_;
  const ModelLayout layout_;
  const absl::Span<const float> gradient_;
  grpc::ClientContext ctx_;
  std::unique_ptr<RawStream> stream_;
  std::vector<uint16_t> encoded_;  // bfloat16: the gradient as sent, kept until the call ends
  absl::Mutex mu_;
  std::vector<int> queue_ ABSL_GUARDED_BY(mu_);
  v1::PushTrailer trailer_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ = false;
  std::thread writer_;
  std::optional<ModelReceiver> receiver_ ABSL_GUARDED_BY(mu_);  // the model, after FinishEarly
  bool done_ ABSL_GUARDED_BY(mu_) = false;                      // its stream has ended
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  std::thread reader_;
};

absl::StatusOr<std::unique_ptr<PushStream>> GrpcPsClient::StartPushPull(const PushedStep& push,
                                                                        const ModelLayout& layout,
                                                                        absl::Span<const float> gradient) {
  if (absl::Status s = CheckModelSize(gradient, layout, "a gradient"); !s.ok()) return s;
  if (gradient.empty()) return absl::InvalidArgumentError("a streamed push needs the gradient's buffer");
  return std::unique_ptr<PushStream>(new GrpcPushStream(this, PushHeaderOf(push), layout, gradient));
}

}  // namespace

std::unique_ptr<PsClient> MakeGrpcPsClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options) {
  return std::make_unique<GrpcPsClient>(std::move(channel), options);
}

namespace {

absl::StatusOr<std::unique_ptr<PsClient>> MakePlainClient(const std::string& target, const ClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials({options.tls_ca, options.tls_cert, options.tls_key});
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  // A restarted server is found again within a second or two, not after gRPC's default
  // reconnect backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  return MakeGrpcPsClient(grpc::CreateCustomChannel(target, *credentials, args), options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> MakeGrpcPsClient(const std::string& target, const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<PsClient>> coordinator = MakePlainClient(target, options);
  if (!coordinator.ok()) return coordinator.status();
  // A sharded job's Join names its shards: their clients are made then, alike.
  return std::unique_ptr<PsClient>(new ShardedPsClient(
      *std::move(coordinator), [options](const std::string& address) { return MakePlainClient(address, options); }));
}

}  // namespace worker
}  // namespace omnilearn
