// The service's handlers (Join, Push, Pull, Heartbeat, Leave, GetStatus) against a real
// core, over an in-process channel (no port), driven by a sequence of hostile messages:
// protos parsed from the input, sent as a client would, optionally under the session's
// real id and secret so that the deeper paths are reached. Whatever the input: no crash,
// no leak, no undefined behaviour, no deadlock (every call has a short deadline), and a
// refused push never moves the model.
#include <grpcpp/grpcpp.h>

#include "common/grpc_chunks.h"
#include "common/grpc_raw.h"
#include "fuzz/fuzz_input.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/control/parameter_server_core.h"
#include "server/rpc/service.h"

namespace {

using omnilearn::fuzz::FuzzInput;
namespace v1 = omnilearn::v1;

template <typename Request, typename Writer>
void WriteChunks(FuzzInput& in, Writer* writer) {
  for (int n = in.Byte() % 4; n > 0; --n) {
    Request m;
    if (!m.mutable_chunk()->ParseFromString(in.Bytes())) continue;
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
}

// Parses a request of a session-keyed unary call, optionally under the real session.
template <typename Request, typename Call>
void Unary(FuzzInput& in, bool as_session, uint64_t id, const std::string& secret, Call call) {
  Request m;
  if (!m.ParseFromString(in.Bytes())) return;
  if (as_session) {
    m.set_worker_id(id);
    m.set_session_secret(secret);
  }
  call(m);
}

// A core and its service on an in-process channel, and the session a fuzzed join made.
class Harness {
 public:
  explicit Harness(omnilearn::server::Mode mode) {
    omnilearn::server::ServerOptions o;
    o.mode = mode;
    o.num_workers = 1;
    o.controller.global_batch = 8;
    o.round_timeout = absl::Milliseconds(20);
    o.lease = absl::Seconds(5);
    o.start_timeout = absl::Milliseconds(50);
    o.max_model_bytes = 1 << 20;
    auto core = omnilearn::server::ParameterServerCore::Create(o);
    if (!core.ok()) __builtin_trap();
    core_ = std::move(*core);
    service_ = std::make_unique<omnilearn::server::ParameterServerService>(core_.get(), absl::Milliseconds(100));
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    channel_ = server_->InProcessChannel({});
    stub_ = v1::ParameterServer::NewStub(channel_);
  }
  ~Harness() {
    core_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  // One call, chosen by `kind`; its bit 0x80 sends it under the session's id and secret.
  void Call(FuzzInput& in, uint8_t kind) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    const bool as_session = kind & 0x80;
    switch (kind % 6) {
      case 0:
        return Join(in, &ctx);
      case 1:
        return Push(in, &ctx, as_session, /*raw=*/kind & 0x40);
      case 2:
        return Pull(in, &ctx, as_session);
      case 3: {
        v1::HeartbeatResponse r;
        return Unary<v1::HeartbeatRequest>(in, as_session, id_, secret_,
                                           [&](const v1::HeartbeatRequest& m) { (void)stub_->Heartbeat(&ctx, m, &r); });
      }
      case 4: {
        v1::LeaveResponse r;
        return Unary<v1::LeaveRequest>(in, as_session, id_, secret_,
                                       [&](const v1::LeaveRequest& m) { (void)stub_->Leave(&ctx, m, &r); });
      }
      default: {
        v1::GetStatusResponse r;
        (void)stub_->GetStatus(&ctx, v1::GetStatusRequest(), &r);
      }
    }
  }

 private:
  void Join(FuzzInput& in, grpc::ClientContext* ctx) {
    v1::JoinRequest m;
    if (!m.mutable_header()->ParseFromString(in.Bytes())) return;
    v1::JoinResponse r;
    auto writer = stub_->Join(ctx, &r);
    if (writer->Write(m)) WriteChunks<v1::JoinRequest>(in, writer.get());
    if (writer->Finish().ok() && r.worker_id() != 0) {
      id_ = r.worker_id();
      secret_ = r.session_secret();
    }
  }

  // `raw`: the chunks as raw bytes, for the service's in-place reader on anything.
  void Push(FuzzInput& in, grpc::ClientContext* ctx, bool as_session, bool raw) {
    v1::PushRequest m;
    if (!m.mutable_header()->ParseFromString(in.Bytes())) return;
    if (as_session) {
      m.mutable_header()->set_worker_id(id_);
      m.mutable_header()->set_session_secret(secret_);
    }
    const uint64_t before = core_->version();
    v1::PushResponse r;
    grpc::Status s;
    if (raw) {
      const omnilearn::raw::Method method(kPushPath, omnilearn::raw::Method::Kind::kClientStreaming, channel_);
      std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer = method.OpenUpload(channel_.get(), ctx, &r);
      if (writer->Write(omnilearn::Serialize(m))) {
        for (int n = in.Byte() % 4; n > 0; --n) {
          grpc::Slice bytes(in.Bytes());
          if (!writer->Write(grpc::ByteBuffer(&bytes, 1))) break;
        }
      }
      writer->WritesDone();
      s = writer->Finish();
    } else {
      auto writer = stub_->Push(ctx, &r);
      if (writer->Write(m)) WriteChunks<v1::PushRequest>(in, writer.get());
      s = writer->Finish();
    }
    if (!s.ok() && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED && core_->version() != before) {
      __builtin_trap();  // a refused push moved the model
    }
  }

  void Pull(FuzzInput& in, grpc::ClientContext* ctx, bool as_session) {
    v1::PullRequest m;
    if (!m.ParseFromString(in.Bytes())) return;
    if (as_session) {
      m.set_worker_id(id_);
      m.set_session_secret(secret_);
    }
    auto reader = stub_->Pull(ctx, m);
    v1::PullResponse r;
    while (reader->Read(&r)) {
    }
    (void)reader->Finish();
  }

  static constexpr const char* kPushPath = "/omnilearn.v1.ParameterServer/Push";
  std::unique_ptr<omnilearn::server::ParameterServerCore> core_;
  std::unique_ptr<omnilearn::server::ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  uint64_t id_ = 0;
  std::string secret_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const omnilearn::server::Mode modes[] = {omnilearn::server::Mode::kSync, omnilearn::server::Mode::kAsync,
                                           omnilearn::server::Mode::kSsp};
  Harness harness(modes[in.Byte() % 3]);
  for (int op = 0; op < 12 && !in.empty(); ++op) harness.Call(in, in.Byte());
  return 0;
}
