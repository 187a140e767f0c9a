#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/etcd_client.h"
#include "common/grpc_chunks.h"
#include "common/grpc_raw.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.grpc.pb.h"
#include "worker/client/following_ps_client.h"
#include "worker/client/grpc_push_stream.h"
#include "worker/client/model_receiver.h"
#include "worker/client/ps_client.h"
#include "worker/client/ps_proto.h"
#include "worker/client/sharded_ps_client.h"

namespace omnilearn {
namespace worker {
namespace {

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
      feedback_.Reset();
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

  bool AwaitConnection(absl::Duration timeout) override {
    return channel_->WaitForConnected(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  }

 private:
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
    feedback_.Reset();  // a new session: no rounding error carried over
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
    const int64_t n = static_cast<int64_t>(gradient.size());
    encoded_.resize(n);
    feedback_.Encode(gradient.data(), 0, n, n, encoded_.data());
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
  // The session's wire dtype and, in bfloat16, the encoded gradient of a whole push being
  // sent. Held for a whole push.
  mutable absl::Mutex encode_mu_;
  v1::WireDtype wire_dtype_ ABSL_GUARDED_BY(encode_mu_) = v1::WIRE_DTYPE_F32;
  std::vector<uint16_t> encoded_ ABSL_GUARDED_BY(encode_mu_);
  Bfloat16Feedback feedback_;  // the rounding error carried to the next push (its own lock)
  const absl::Duration timeout_;
  const bool offer_bfloat16_;
  const std::string authorization_;
};

absl::StatusOr<std::unique_ptr<PushStream>> GrpcPsClient::StartPushPull(const PushedStep& push,
                                                                        const ModelLayout& layout,
                                                                        absl::Span<const float> gradient) {
  if (absl::Status s = CheckModelSize(gradient, layout, "a gradient"); !s.ok()) return s;
  if (gradient.empty()) return absl::InvalidArgumentError("a streamed push needs the gradient's buffer");
  v1::PushHeader header;
  {
    absl::MutexLock lock(&encode_mu_);
    header = Signed(PushHeaderOf(push));
  }
  header.set_trailer(true);
  return std::unique_ptr<PushStream>(new GrpcPushStream(
      std::move(header), layout, gradient, &feedback_, [this](grpc::ClientContext* ctx) { Prepare(ctx); },
      [this](grpc::ClientContext* ctx) -> std::unique_ptr<RawStream> { return OpenPushPull(ctx); }));
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
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  // A server whose host was cut off without closing the connection is noticed (within
  // 25 s: kKeepaliveTimeoutMs): a call waiting for its answer then fails UNAVAILABLE and the
  // worker reconnects (partition_test saw a worker whose request had been acknowledged
  // before the cut wait for that answer until its deadline, having nothing to send that
  // would have found the connection gone). Servers accept a ping every 4 s
  // (ConfigureServerBuilder).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return MakeGrpcPsClient(grpc::CreateCustomChannel(target, *credentials, args), options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> MakeGrpcPsClient(const std::string& target, const ClientOptions& options) {
  const auto make = [options](const std::string& address) { return MakePlainClient(address, options); };
  absl::StatusOr<std::unique_ptr<PsClient>> coordinator;
  if (IsEtcdAddress(target)) {  // the coordinator elected there, looked up at each Join
    absl::StatusOr<EtcdTarget> etcd_target = ParseEtcdTarget(target);
    if (!etcd_target.ok()) return etcd_target.status();
    auto etcd = std::make_shared<EtcdClient>(*etcd_target);
    coordinator = std::make_unique<FollowingPsClient>([etcd] { return etcd->Coordinator(); }, make);
  } else {
    coordinator = MakePlainClient(target, options);
  }
  if (!coordinator.ok()) return coordinator.status();
  // A sharded job's Join names its shards: their clients are made then, alike.
  return std::unique_ptr<PsClient>(new ShardedPsClient(*std::move(coordinator), make));
}

}  // namespace worker
}  // namespace omnilearn
