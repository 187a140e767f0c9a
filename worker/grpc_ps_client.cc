#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.grpc.pb.h"
#include "worker/ps_client.h"

namespace omnilearn {
namespace worker {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const char* call) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(call, ": ", s.error_message()));
}

class GrpcPsClient : public PsClient {
 public:
  GrpcPsClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options)
      : stub_(v1::ParameterServer::NewStub(channel)),
        timeout_(options.rpc_timeout),
        authorization_(options.auth_token.empty() ? "" : absl::StrCat("Bearer ", options.auth_token)) {}

  absl::StatusOr<v1::JoinResponse> Join(const v1::JoinHeader& header, const ModelLayout& layout,
                                        const std::vector<float>* initial) override {
    return Upload<v1::JoinRequest, v1::JoinResponse>(
        "Join", [this](grpc::ClientContext* ctx, v1::JoinResponse* r) { return stub_->Join(ctx, r); }, header, layout,
        initial);
  }

  absl::StatusOr<uint64_t> Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                std::vector<float>* weights) override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::PullRequest request;
    request.set_worker_id(worker_id);
    request.set_have_version(have_version);
    request.set_session_secret(secret());
    auto reader = stub_->Pull(&ctx, request);
    v1::PullResponse msg;
    uint64_t version = have_version;
    bool up_to_date = true;
    ChunkAssembler assembler(&layout);
    absl::Status chunk_status;
    while (reader->Read(&msg)) {
      if (msg.has_header()) {
        version = msg.header().model_version();
        up_to_date = msg.header().up_to_date();
      } else if (chunk_status.ok()) {
        chunk_status = assembler.Add(msg.chunk());
      }
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return FromGrpc(s, "Pull");
    if (!chunk_status.ok()) return chunk_status;
    if (!up_to_date) {
      auto flat = assembler.Finish();
      if (!flat.ok()) return flat.status();
      *weights = std::move(*flat);
    }
    return version;
  }

  absl::StatusOr<v1::PushResponse> Push(const v1::PushHeader& header, const ModelLayout& layout,
                                        const std::vector<float>& gradient) override {
    v1::PushHeader signed_header = header;
    signed_header.set_session_secret(secret());
    return Upload<v1::PushRequest, v1::PushResponse>(
        "Push", [this](grpc::ClientContext* ctx, v1::PushResponse* r) { return stub_->Push(ctx, r); }, signed_header,
        layout, header.out_of_memory() || header.report_only() ? nullptr : &gradient);
  }

  absl::StatusOr<v1::PushResponse> PushPull(const v1::PushHeader& header, const ModelLayout& layout,
                                            const std::vector<float>& gradient, uint64_t* model_version,
                                            std::vector<float>* weights) override {
    if (!push_pull_.load()) return PsClient::PushPull(header, layout, gradient, model_version, weights);
    grpc::ClientContext ctx;
    Prepare(&ctx);
    auto stream = stub_->PushPull(&ctx);
    v1::PushRequest msg;
    *msg.mutable_header() = header;
    msg.mutable_header()->set_session_secret(secret());
    if (stream->Write(msg) && !header.out_of_memory() && !header.report_only()) {
      ForEachChunk(layout, gradient.data(), kMaxChunkBytes, [&](v1::TensorChunk& c) {
        v1::PushRequest chunk;
        chunk.mutable_chunk()->Swap(&c);
        return stream->Write(chunk);
      });
    }
    stream->WritesDone();
    v1::PushPullResponse in;
    v1::PushResponse reply;
    bool got_reply = false, got_header = false, got_model = false;
    uint64_t version = 0;
    // The model is assembled into a spare buffer and swapped in only when complete: the
    // worker's weights stay intact on any failure (a rejoin may send them).
    absl::MutexLock lock(&spare_mu_);
    std::optional<ChunkAssembler> assembler;
    absl::Status chunk_status;
    while (stream->Read(&in)) {
      if (in.has_reply()) {
        reply = in.reply();
        got_reply = true;
      } else if (in.has_header()) {
        version = in.header().model_version();
        got_header = true;
        got_model = !in.header().up_to_date();
        if (got_model) assembler.emplace(&layout, std::move(spare_));
      } else if (!assembler) {
        chunk_status = absl::InvalidArgumentError("PushPull: a chunk before the model's header");
      } else if (chunk_status.ok()) {
        chunk_status = assembler->Add(in.chunk());
      }
    }
    grpc::Status s = stream->Finish();
    if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED && !got_reply) {
      push_pull_.store(false);  // an older server: Push and Pull from now on
      return PsClient::PushPull(header, layout, gradient, model_version, weights);
    }
    if (!s.ok()) return FromGrpc(s, "PushPull");
    if (!chunk_status.ok()) return chunk_status;
    if (!got_reply) return absl::InternalError("PushPull: the server sent no reply");
    if (got_model) {
      absl::StatusOr<std::vector<float>> flat = assembler->Finish();
      if (!flat.ok()) return flat.status();
      spare_ = std::move(*weights);
      *weights = std::move(*flat);
    }
    if (got_header) *model_version = version;
    return reply;
  }

  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(uint64_t worker_id) override {
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
    return response;
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
  std::string secret() const {
    absl::MutexLock lock(&secret_mu_);
    return secret_;
  }

  void Prepare(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoSeconds(timeout_));
    if (!authorization_.empty()) ctx->AddMetadata(kAuthorizationKey, authorization_);
  }

  // A client-streamed call (Join, Push): the header, then `values` (when given) as
  // chunks, then the server's one response.
  template <typename Request, typename Response, typename Header, typename Open>
  absl::StatusOr<Response> Upload(const char* call, Open open, const Header& header, const ModelLayout& layout,
                                  const std::vector<float>* values) const {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    Response response;
    auto writer = open(&ctx, &response);
    Request msg;
    *msg.mutable_header() = header;
    if (writer->Write(msg) && values != nullptr) {
      ForEachChunk(layout, values->data(), kMaxChunkBytes, [&](v1::TensorChunk& c) {
        Request chunk;
        chunk.mutable_chunk()->Swap(&c);
        return writer->Write(chunk);
      });
    }
    writer->WritesDone();
    grpc::Status s = writer->Finish();
    if (!s.ok()) return FromGrpc(s, call);
    return response;
  }

  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  std::atomic<bool> push_pull_{true};  // the server implements PushPull
  mutable absl::Mutex secret_mu_;
  std::string secret_ ABSL_GUARDED_BY(secret_mu_);  // the session's, sent with every call
  absl::Mutex spare_mu_;
  std::vector<float> spare_ ABSL_GUARDED_BY(spare_mu_);  // the model before the last one, reused
  const absl::Duration timeout_;
  const std::string authorization_;
};

}  // namespace

std::unique_ptr<PsClient> MakeGrpcPsClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options) {
  return std::make_unique<GrpcPsClient>(std::move(channel), options);
}

absl::StatusOr<std::unique_ptr<PsClient>> MakeGrpcPsClient(const std::string& target, const ClientOptions& options) {
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
  return MakeGrpcPsClient(grpc::CreateCustomChannel(target, *credentials, args), options);
}

}  // namespace worker
}  // namespace omnilearn
