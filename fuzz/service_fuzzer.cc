// The service's handlers (Join, Push, Pull, Heartbeat, Leave, GetStatus) against a real
// core, over an in-process channel (no port), driven by a sequence of hostile messages:
// protos parsed from the input, sent as a client would, optionally under the session's
// real id and secret so that the deeper paths are reached. Whatever the input: no crash,
// no leak, no undefined behaviour, no deadlock (every call has a short deadline), and a
// refused push never moves the model.
#include <grpcpp/grpcpp.h>

#include "common/grpc_chunks.h"
#include "fuzz/fuzz_input.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/parameter_server_core.h"
#include "server/service.h"

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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  omnilearn::server::ServerOptions o;
  const omnilearn::server::Mode modes[] = {omnilearn::server::Mode::kSync, omnilearn::server::Mode::kAsync,
                                           omnilearn::server::Mode::kSsp};
  o.mode = modes[in.Byte() % 3];
  o.num_workers = 1;
  o.controller.global_batch = 8;
  o.round_timeout = absl::Milliseconds(20);
  o.lease = absl::Seconds(5);
  o.start_timeout = absl::Milliseconds(50);
  o.max_model_bytes = 1 << 20;
  auto core = omnilearn::server::ParameterServerCore::Create(o);
  if (!core.ok()) __builtin_trap();
  omnilearn::server::ParameterServerService service(core->get(), absl::Milliseconds(100));
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  std::shared_ptr<grpc::Channel> channel = server->InProcessChannel({});
  std::unique_ptr<v1::ParameterServer::Stub> stub = v1::ParameterServer::NewStub(channel);
  const std::string push_path = "/omnilearn.v1.ParameterServer/Push";
  const grpc::internal::RpcMethod raw_push(push_path.c_str(), grpc::internal::RpcMethod::CLIENT_STREAMING);
  uint64_t id = 0;
  std::string secret;
  for (int op = 0; op < 12 && !in.empty(); ++op) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    const uint8_t kind = in.Byte();
    const bool as_session = kind & 0x80;  // under the real id and secret
    switch (kind % 6) {
      case 0: {
        v1::JoinRequest m;
        if (!m.mutable_header()->ParseFromString(in.Bytes())) break;
        v1::JoinResponse r;
        auto writer = stub->Join(&ctx, &r);
        if (writer->Write(m)) WriteChunks<v1::JoinRequest>(in, writer.get());
        if (writer->Finish().ok() && r.worker_id() != 0) {
          id = r.worker_id();
          secret = r.session_secret();
        }
        break;
      }
      case 1: {
        v1::PushRequest m;
        if (!m.mutable_header()->ParseFromString(in.Bytes())) break;
        if (as_session) {
          m.mutable_header()->set_worker_id(id);
          m.mutable_header()->set_session_secret(secret);
        }
        const uint64_t before = (*core)->version();
        v1::PushResponse r;
        grpc::Status s;
        if (kind & 0x40) {  // the chunks as raw bytes: the service's in-place reader on anything
          std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
              grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel.get(), raw_push, &ctx, &r));
          if (writer->Write(omnilearn::Serialize(m))) {
            for (int n = in.Byte() % 4; n > 0; --n) {
              grpc::Slice bytes(in.Bytes());
              if (!writer->Write(grpc::ByteBuffer(&bytes, 1))) break;
            }
          }
          writer->WritesDone();
          s = writer->Finish();
        } else {
          auto writer = stub->Push(&ctx, &r);
          if (writer->Write(m)) WriteChunks<v1::PushRequest>(in, writer.get());
          s = writer->Finish();
        }
        if (!s.ok() && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED && (*core)->version() != before) {
          __builtin_trap();  // a refused push moved the model
        }
        break;
      }
      case 2: {
        v1::PullRequest m;
        if (!m.ParseFromString(in.Bytes())) break;
        if (as_session) {
          m.set_worker_id(id);
          m.set_session_secret(secret);
        }
        auto reader = stub->Pull(&ctx, m);
        v1::PullResponse r;
        while (reader->Read(&r)) {
        }
        (void)reader->Finish();
        break;
      }
      case 3: {
        v1::HeartbeatResponse r;
        Unary<v1::HeartbeatRequest>(in, as_session, id, secret,
                                    [&](const v1::HeartbeatRequest& m) { (void)stub->Heartbeat(&ctx, m, &r); });
        break;
      }
      case 4: {
        v1::LeaveResponse r;
        Unary<v1::LeaveRequest>(in, as_session, id, secret,
                                [&](const v1::LeaveRequest& m) { (void)stub->Leave(&ctx, m, &r); });
        break;
      }
      default: {
        v1::GetStatusResponse r;
        (void)stub->GetStatus(&ctx, v1::GetStatusRequest(), &r);
        break;
      }
    }
  }
  (*core)->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}
