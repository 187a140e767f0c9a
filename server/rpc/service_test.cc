// The gRPC adapter end to end over an in-process channel (no ports): the real client,
// the real service, the real core.
#include "server/rpc/service.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "common/await_state.h"
#include "common/clock.h"
#include "common/grpc_raw.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/replica_store.h"
#include "server/control/coordinator_shards.h"
#include "server/control/shard_commands.h"
#include "server/rpc/replica_calls.h"
#include "server/rpc/shard_server_service.h"
#include "server/rpc/shard_wire.h"
#include "worker/client/ps_client.h"
#include "worker/client/ps_proto.h"

namespace omnilearn {
namespace server {
namespace {

worker::ClientOptions WithToken(std::string token) {
  worker::ClientOptions o;
  o.rpc_timeout = absl::Seconds(10);
  o.auth_token = std::move(token);
  return o;
}

// A join as "w0" that brings the model's values (the client sends the layout).
worker::JoinRequest Request() {
  worker::JoinRequest r;
  r.worker.name = "w0";
  r.has_initial_parameters = true;
  return r;
}

// A push of 8 samples (the fixture's global batch) by session `id`, on model `version`.
worker::PushedStep StepOf(uint64_t id, uint64_t version = 0) {
  worker::PushedStep p;
  p.worker_id = id;
  p.model_version = version;
  p.step.batch_size = 8;
  p.step.end.compute_seconds = 0.01;
  return p;
}

struct Fixture {
  explicit Fixture(std::string server_token = "", std::string client_token = "", ServiceLimits limits = {},
                   int num_workers = 1, v1::WireDtype wire_dtype = v1::WIRE_DTYPE_F32) {
    ServerOptions o;
    o.clock = &clock;          // leases, rounds, waits and idle streams move only when a test says
    o.lease = absl::Hours(1);  // outlives the idle timeouts the tests advance past
    o.mode = Mode::kAsync;
    o.num_workers = num_workers;
    o.controller.global_batch = 8;
    o.optimizer.learning_rate = 1.0;
    o.optimizer.momentum = 0;
    o.optimizer.weight_decay = 0;
    core = std::move(*ParameterServerCore::Create(o));
    service = std::make_unique<ParameterServerService>(core.get(), absl::Seconds(10), server_token, limits, wire_dtype);
    grpc::ServerBuilder builder;
    builder.RegisterService(service.get());
    builder.RegisterService(&service->peers());
    server = builder.BuildAndStart();
    grpc::ChannelArguments args;
    channel = server->InProcessChannel(args);
    client = worker::MakeGrpcPsClient(channel, WithToken(client_token));
    layout = *ModelLayout::Create({{"w", {2, 3}}, {"b", {3}}});
  }
  // Joins as "w0" with `init` as the model; the client then signs its calls with the session.
  absl::StatusOr<worker::JoinReply> JoinSigned(const std::vector<float>& init) {
    absl::StatusOr<worker::JoinReply> joined = client->Join(Request(), layout, init);
    REQUIRE(joined.ok());
    client->SetSessionSecret(joined->session_secret);
    return joined;
  }
  ~Fixture() {
    core->Shutdown();
    server->Shutdown();
  }
  FakeClock clock;
  std::unique_ptr<ParameterServerCore> core;
  std::unique_ptr<ParameterServerService> service;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<worker::PsClient> client;
  ModelLayout layout;
};

TEST_CASE("join, pull, push and status over gRPC", "[service]") {
  Fixture f;
  const std::vector<float> init = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto joined = f.JoinSigned(init);
  REQUIRE(joined->batch_size == 8);
  std::vector<float> weights(9);
  auto version = f.client->Pull(joined->worker_id, ~0ull, f.layout, absl::MakeSpan(weights));
  REQUIRE(version.ok());
  REQUIRE(weights == init);
  // Up to date: no chunks, the vector is left alone.
  std::vector<float> untouched(9, -1.0f);
  REQUIRE(f.client->Pull(joined->worker_id, *version, f.layout, absl::MakeSpan(untouched)).ok());
  REQUIRE(untouched == std::vector<float>(9, -1.0f));

  auto reply = f.client->Push(StepOf(joined->worker_id), f.layout, std::vector<float>(9, 1.0f));
  REQUIRE(reply.ok());
  REQUIRE(reply->applied);
  REQUIRE(reply->model_version == 1);
  REQUIRE(reply->action == worker::Action::kContinue);
  REQUIRE(f.client->Pull(joined->worker_id, 0, f.layout, absl::MakeSpan(weights)).ok());
  REQUIRE(weights[0] == 0.0f);  // 1 - lr * (8/8) * 1

  auto stub = v1::ParameterServer::NewStub(f.channel);
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  REQUIRE(stub->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok());
  REQUIRE(status.model_version() == 1);
  REQUIRE(status.workers_size() == 1);
  REQUIRE(status.parameter_count() == 9);
}

// A streamed push of `grad` (kept by the caller until it ends) by the session `joined`.
std::unique_ptr<worker::PushStream> OpenStream(Fixture& f, const worker::JoinReply& joined,
                                               const std::vector<float>& grad) {
  auto stream = f.client->StartPushPull(StepOf(joined.worker_id), f.layout, grad);
  REQUIRE(stream.ok());
  return std::move(*stream);
}

// One async push of `grad` by the fixture's joined worker, streamed tensor by tensor in
// reverse order (as backward makes them final) with the trailer, or whole: the weights after.
std::vector<float> PushedModel(const std::vector<float>& grad, bool streamed, absl::Status* status = nullptr) {
  Fixture f;
  auto joined = f.JoinSigned(std::vector<float>(9, 0.5f));
  REQUIRE(joined->push_trailer);  // this server reads trailers
  worker::PushedStep push = StepOf(joined->worker_id);
  push.step.end = worker::StepEnd{0.01, 0.25, std::nullopt};
  std::vector<float> weights(9);
  uint64_t version = 0;
  absl::StatusOr<worker::PushReply> r;
  if (streamed) {
    auto stream = f.client->StartPushPull(push, f.layout, grad);
    REQUIRE(stream.ok());
    (*stream)->Send({1});  // "b" first: backward ends at the first layer
    (*stream)->Send({0});
    r = (*stream)->Finish(push.step.end, &version, absl::MakeSpan(weights));
  } else {
    r = f.client->PushPull(push, f.layout, grad, &version, absl::MakeSpan(weights));
  }
  if (status != nullptr) *status = r.status();
  REQUIRE(f.client->Pull(joined->worker_id, ~0ull, f.layout, absl::MakeSpan(weights)).ok());
  return weights;
}

TEST_CASE("a push streamed in buckets during backward equals a whole push bit for bit", "[service][bucket]") {
  std::vector<float> grad(9);
  for (int i = 0; i < 9; ++i) grad[i] = 0.1f * static_cast<float>(i) - 0.37f;
  absl::Status streamed_status;
  const std::vector<float> streamed = PushedModel(grad, true, &streamed_status);
  REQUIRE(streamed_status.ok());
  const std::vector<float> whole = PushedModel(grad, false);
  REQUIRE(std::memcmp(streamed.data(), whole.data(), sizeof(float) * 9) == 0);
  REQUIRE(streamed != std::vector<float>(9, 0.5f));  // the push was applied
}

TEST_CASE("a streamed push's model arrives tensor by tensor after the reply", "[service][bucket]") {
  Fixture f;
  auto joined = f.JoinSigned(std::vector<float>(9, 0.5f));
  const std::vector<float> grad(9, 1.0f);
  std::unique_ptr<worker::PushStream> stream = OpenStream(f, *joined, grad);
  std::vector<float> weights(9, -7.0f);
  uint64_t version = 0;
  auto reply = stream->FinishEarly(worker::StepEnd{0.01, 0, std::nullopt}, &version, absl::MakeSpan(weights));
  REQUIRE(reply.ok());
  REQUIRE(reply->applied);
  REQUIRE(version == 1);            // the version the weights will hold, known with the reply
  REQUIRE(stream->AwaitTensor(0));  // "w": 6 values, in place
  for (int i = 0; i < 6; ++i) REQUIRE(weights[i] == 0.5f - 1.0f);
  REQUIRE(stream->AwaitModel().ok());
  REQUIRE(weights == std::vector<float>(9, -0.5f));
}

TEST_CASE("a bad last bucket is refused and leaves the model untouched", "[service][bucket]") {
  std::vector<float> grad(9, 1.0f);
  grad[0] = std::nanf("");  // in "w", the tensor that leaves last
  absl::Status status;
  REQUIRE(PushedModel(grad, true, &status) == std::vector<float>(9, 0.5f));
  REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(status.message(), "NaN"));
}

TEST_CASE("a streamed push given up before its end changes nothing, and frees its slot", "[service][bucket]") {
  Fixture f;
  auto joined = f.JoinSigned(std::vector<float>(9, 0.5f));
  const std::vector<float> grad(9, 1.0f);
  {
    std::unique_ptr<worker::PushStream> stream = OpenStream(f, *joined, grad);
    stream->Send({1});
    REQUIRE(AwaitState([&] { return f.service->PushInFlight(joined->worker_id); }));
  }  // dropped unfinished (out of memory in backward, say): cancelled
  REQUIRE(AwaitState([&] { return !f.service->PushInFlight(joined->worker_id); }));
  REQUIRE(f.core->version() == 0);
  std::vector<float> weights(9);
  REQUIRE(f.client->Pull(joined->worker_id, ~0ull, f.layout, absl::MakeSpan(weights)).ok());
  REQUIRE(weights == std::vector<float>(9, 0.5f));
}

TEST_CASE("trailers out of place are refused", "[service][bucket]") {
  Fixture f;
  auto joined = f.JoinSigned(std::vector<float>(9, 0.5f));
  auto stub = v1::ParameterServer::NewStub(f.channel);
  v1::PushRequest header;
  header.mutable_header()->set_worker_id(joined->worker_id);
  header.mutable_header()->set_batch_size(8);
  header.mutable_header()->set_compute_seconds(0.01);
  header.mutable_header()->set_session_secret(joined->session_secret);
  v1::PushRequest trailer;
  trailer.mutable_trailer()->set_compute_seconds(0.01);
  std::vector<v1::PushRequest> chunks;
  REQUIRE(ForEachChunk(f.layout, std::vector<float>(9, 1.0f).data(), 1 << 20, [&](v1::TensorChunk& c) {
    v1::PushRequest m;
    *m.mutable_chunk() = c;
    chunks.push_back(m);
    return true;
  }));
  auto push = [&](const std::vector<v1::PushRequest>& messages) {
    grpc::ClientContext ctx;
    v1::PushResponse r;
    auto writer = stub->Push(&ctx, &r);
    for (const auto& m : messages) writer->Write(m);
    writer->WritesDone();
    return writer->Finish();
  };
  // A trailer the header did not announce.
  std::vector<v1::PushRequest> unannounced = {header, chunks[0], chunks[1], trailer};
  REQUIRE(push(unannounced).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  // Announced, but before the gradient is whole; and announced, never sent.
  header.mutable_header()->set_trailer(true);
  std::vector<v1::PushRequest> early = {header, chunks[0], trailer, chunks[1]};
  REQUIRE(push(early).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  std::vector<v1::PushRequest> missing = {header, chunks[0], chunks[1]};
  const grpc::Status s = push(missing);
  REQUIRE(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(absl::StrContains(s.error_message(), "trailer never came"));
  REQUIRE(f.core->version() == 0);
  // Announced and sent last: applied, with the trailer's time.
  std::vector<v1::PushRequest> good = {header, chunks[1], chunks[0], trailer};
  REQUIRE(push(good).ok());
  REQUIRE(f.core->version() == 1);
}

TEST_CASE("bad pushes get clear statuses and leave the model unchanged", "[service]") {
  Fixture f;
  const std::vector<float> init(9, 0.5f);
  auto joined = f.JoinSigned(init);
  worker::PushedStep push = StepOf(joined->worker_id);

  // A gradient for another model: the layout the client chunks with differs.
  const ModelLayout other = *ModelLayout::Create({{"w", {3, 3}}});
  auto wrong = f.client->Push(push, other, std::vector<float>(9, 1.0f));
  REQUIRE(wrong.status().code() == absl::StatusCode::kInvalidArgument);
  std::vector<float> nan(9, 1.0f);
  nan[4] = NAN;
  REQUIRE(f.client->Push(push, f.layout, nan).status().code() == absl::StatusCode::kInvalidArgument);
  push.worker_id = 77;
  REQUIRE(f.client->Push(push, f.layout, std::vector<float>(9, 1.0f)).status().code() == absl::StatusCode::kNotFound);

  std::vector<float> weights(9);
  REQUIRE(f.client->Pull(joined->worker_id, ~0ull, f.layout, absl::MakeSpan(weights)).ok());
  REQUIRE(weights == init);
  const ServerSnapshot s = f.core->Snapshot();
  REQUIRE(s.version == 0);
  REQUIRE(s.pushes_by_result.at("invalid") == 2);
  REQUIRE(s.pushes_by_result.at("unknown_worker") == 1);
}

TEST_CASE("samples, buffers, finished leaves and stop travel over gRPC", "[service]") {
  Fixture f;
  const ModelLayout with_buffer = *ModelLayout::Create({{"w", {2}}, {"bn.running_mean", {2}, true}});
  worker::JoinRequest h = Request();
  h.worker.dataset_size = 20;
  const std::vector<float> init = {1, 1, 0, 0};
  auto joined = f.client->Join(h, with_buffer, init);
  if (joined.ok()) f.client->SetSessionSecret(joined->session_secret);
  REQUIRE(joined.ok());
  REQUIRE(joined->samples.size() == 1);
  REQUIRE(joined->samples[0].ids.size() == 8);
  auto reply = f.client->Push(StepOf(joined->worker_id), with_buffer, {0, 0, 4, 4});
  REQUIRE(reply.ok());
  REQUIRE(CountSamples(reply->samples) == 8);
  std::vector<float> weights(4);
  REQUIRE(f.client->Pull(joined->worker_id, ~0ull, with_buffer, absl::MakeSpan(weights)).ok());
  REQUIRE(weights[2] == 4.0f);  // async: blended by the push's share, 8/8
  REQUIRE(f.client->Leave(joined->worker_id, /*finished=*/true).ok());
  REQUIRE(f.core->Snapshot().job_finished);
  auto stub = v1::ParameterServer::NewStub(f.channel);
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  REQUIRE(stub->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok());
  REQUIRE(status.job_finished());
  REQUIRE(status.dataset_size() == 20);
  REQUIRE(status.global_samples() == 8);
  f.core->Shutdown();
  auto stopped = f.client->Join(h, with_buffer, init);
  REQUIRE(stopped.ok());
  REQUIRE(stopped->action == worker::Action::kStop);
}

TEST_CASE("PushPull: the reply and the new model in one call; a server without it is named as too old", "[service]") {
  Fixture f;
  const std::vector<float> init(9, 1.0f);
  auto joined = f.JoinSigned(init);
  worker::PushedStep push = StepOf(joined->worker_id);
  std::vector<float> weights = init;
  uint64_t version = 0;
  auto reply = f.client->PushPull(push, f.layout, std::vector<float>(9, 1.0f), &version, absl::MakeSpan(weights));
  REQUIRE(reply.ok());
  REQUIRE(reply->applied);
  REQUIRE(version == 1);
  REQUIRE(weights == std::vector<float>(9, 0.0f));  // 1 - lr * (8/8) * 1
  REQUIRE(f.core->Snapshot().pushes_by_result.at("applied") == 1);

  // A server of a release without PushPull: the client says so instead of falling back.
  struct OldService : v1::ParameterServer::Service {
    explicit OldService(ParameterServerService* s) {  // Pull (1) and Push (2) served by `s`
      using S = ParameterServerService;
      MarkMethodStreamed(
          1, raw::BidiHandler(s, [](S* s, grpc::ServerContext* c, S::RawStream* r) { return s->PullRaw(c, r); }));
      MarkMethodStreamed(2, raw::UploadHandler<v1::PushResponse>(
                                s, [](S* s, grpc::ServerContext* c, grpc::ServerReader<grpc::ByteBuffer>* r,
                                      v1::PushResponse* o) { return s->PushRaw(c, r, o); }));
    }
  } old(f.service.get());
  grpc::ServerBuilder builder;
  builder.RegisterService(&old);
  auto server = builder.BuildAndStart();
  grpc::ChannelArguments args;
  auto client = worker::MakeGrpcPsClient(server->InProcessChannel(args), WithToken(""));
  client->SetSessionSecret(joined->session_secret);
  push.model_version = 1;
  auto r = client->PushPull(push, f.layout, std::vector<float>(9, 1.0f), &version, absl::MakeSpan(weights));
  REQUIRE(r.status().code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(absl::StrContains(r.status().message(), "older than this worker's"));
  REQUIRE(f.core->version() == 1);
  server->Shutdown();
}

TEST_CASE("calls for a worker without its session secret are refused and change nothing", "[service][auth]") {
  Fixture f;
  const std::vector<float> init(9, 1.0f);
  auto joined = f.client->Join(Request(), f.layout, init);
  REQUIRE(joined.ok());
  REQUIRE(joined->session_secret.size() == 16);
  const uint64_t id = joined->worker_id;
  const worker::PushedStep push = StepOf(id);
  std::vector<float> weights(9);
  uint64_t version = 0;
  for (const std::string& secret : {std::string(), std::string(16, 'x'), joined->session_secret.substr(1)}) {
    f.client->SetSessionSecret(secret);  // none, a guess, almost right
    REQUIRE(f.client->Pull(id, ~0ull, f.layout, absl::MakeSpan(weights)).status().code() ==
            absl::StatusCode::kPermissionDenied);
    REQUIRE(f.client->Push(push, f.layout, std::vector<float>(9, 1.0f)).status().code() ==
            absl::StatusCode::kPermissionDenied);
    REQUIRE(f.client->PushPull(push, f.layout, std::vector<float>(9, 1.0f), &version, absl::MakeSpan(weights))
                .status()
                .code() == absl::StatusCode::kPermissionDenied);
    REQUIRE(f.client->Heartbeat(id).status().code() == absl::StatusCode::kPermissionDenied);
    REQUIRE(f.client->Leave(id, true).code() == absl::StatusCode::kPermissionDenied);
  }
  ServerSnapshot s = f.core->Snapshot();
  REQUIRE(s.version == 0);
  REQUIRE(s.workers.size() == 1);
  REQUIRE(s.workers[0].state == WorkerState::kActive);
  REQUIRE(s.pushes_by_result.at("unauthenticated") == 6);
  // Resuming the session by its id alone does not take it over either.
  worker::JoinRequest again = Request();
  again.has_initial_parameters = false;
  again.resume_worker_id = id;
  again.resume_secret = "guess";
  REQUIRE(f.client->Join(again, f.layout, {}).status().code() == absl::StatusCode::kAlreadyExists);
  again.resume_secret = joined->session_secret;
  auto resumed = f.client->Join(again, f.layout, {});
  REQUIRE(resumed.ok());
  REQUIRE(resumed->session_secret != joined->session_secret);
  f.client->SetSessionSecret(resumed->session_secret);
  REQUIRE(f.client->Pull(resumed->worker_id, ~0ull, f.layout, absl::MakeSpan(weights)).ok());
}

TEST_CASE("a join the server needs a model from is asked for it: explicitly, or as earlier releases did", "[service]") {
  Fixture f;
  worker::JoinRequest h = Request();
  h.has_initial_parameters = false;
  auto asked = f.client->Join(h, f.layout, {});
  REQUIRE(asked.ok());
  REQUIRE(asked->send_model);
  REQUIRE(absl::StrContains(asked->message, "no model yet"));
  REQUIRE(asked->worker_id == 0);  // no session opened
  REQUIRE(f.core->Snapshot().workers.empty());
  // A worker of an earlier release does not read send_model: FAILED_PRECONDITION, as before.
  auto stub = v1::ParameterServer::NewStub(f.channel);
  grpc::ClientContext ctx;
  v1::JoinResponse response;
  auto writer = stub->Join(&ctx, &response);
  v1::JoinRequest msg;
  *msg.mutable_header() = worker::JoinHeaderOf(h, f.layout, /*offer_bfloat16=*/false);
  msg.mutable_header()->clear_accepts_send_model();
  REQUIRE(writer->Write(msg));
  writer->WritesDone();
  const grpc::Status old = writer->Finish();
  REQUIRE(old.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  REQUIRE(absl::StrContains(old.error_message(), "no model yet"));
  REQUIRE_FALSE(response.send_model());
  // With its model the worker joins; the next worker without one is not asked.
  REQUIRE(f.client->Join(Request(), f.layout, std::vector<float>(9, 1.0f)).ok());
  worker::JoinRequest second = Request();
  second.worker.name = "second";
  second.has_initial_parameters = false;
  auto joined = f.client->Join(second, f.layout, {});
  REQUIRE(joined.ok());
  REQUIRE_FALSE(joined->send_model);
  REQUIRE(joined->worker_id != 0);
}

TEST_CASE("a join declaring a huge model or a bad name is refused before anything is allocated", "[service]") {
  Fixture f;
  // 2^38 floats = 1 TiB: refused from the header alone (this test would be killed otherwise).
  const ModelLayout huge = *ModelLayout::Create({{"w", {int64_t{1} << 19, int64_t{1} << 19}}});
  worker::JoinRequest h = Request();
  h.has_initial_parameters = false;
  auto r = f.client->Join(h, huge, {});
  REQUIRE(r.status().code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(absl::StrContains(r.status().message(), "--max_model_bytes"));
  for (const std::string& bad :
       std::vector<std::string>{"", "has space", std::string(129, 'a'), "new\nline", "quote\""}) {
    worker::JoinRequest named = Request();
    named.worker.name = bad;
    const std::vector<float> init(9, 1.0f);
    REQUIRE(f.client->Join(named, f.layout, init).status().code() == absl::StatusCode::kInvalidArgument);
  }
  REQUIRE(f.core->Snapshot().parameter_count == 0);  // nothing got in
  REQUIRE(f.core->Snapshot().workers.empty());
}

TEST_CASE("with a token, calls without it or with another are refused and counted", "[service][auth]") {
  const std::vector<float> init(9, 1.0f);
  for (const std::string bad : {"", "not-the-token"}) {
    Fixture f("the-token", bad);
    auto joined = f.client->Join(Request(), f.layout, init);
    REQUIRE(joined.status().code() == absl::StatusCode::kUnauthenticated);
    REQUIRE(f.client->Leave(1, false).code() == absl::StatusCode::kUnauthenticated);
    REQUIRE(f.core->Snapshot().parameter_count == 0);  // nothing got in
    REQUIRE(f.core->registry().Serialize().find("omnilearn_unauthenticated_total 2\n") != std::string::npos);
  }
  Fixture f("the-token", "the-token");
  auto joined = f.JoinSigned(init);
  std::vector<float> weights(9);
  REQUIRE(f.client->Pull(joined->worker_id, ~0ull, f.layout, absl::MakeSpan(weights)).ok());
  REQUIRE(f.core->registry().Serialize().find("omnilearn_unauthenticated_total 0\n") != std::string::npos);
}

// A Shard registration for slice 1 of a 2-slice job, under `peer` and `token` (each
// left out when empty). Returns the call's status once it ended or, registered, once the
// coordinator counts the shard (the call is then cancelled).
grpc::Status RegisterShard(Fixture& f, CoordinatorShards& shards, const std::string& peer, const std::string& token,
                           bool previous_release = false) {
  grpc::ClientContext ctx;
  AddPeerToken(ctx, peer);
  AddBearerToken(ctx, token);
  v1::ShardHello hello;
  hello.set_address("shard:1");
  hello.set_shards(2);
  hello.set_partition_bytes(ShardMap::kAutoPartitionBytes);
  // ServerPeers.Shard, or a shard of the previous release's ParameterServer.Shard.
  auto reader = previous_release ? v1::ParameterServer::NewStub(f.channel)->Shard(&ctx, hello)
                                 : v1::ServerPeers::NewStub(f.channel)->Shard(&ctx, hello);
  std::atomic<bool> registered{false};
  std::thread cancel([&] {
    registered = AwaitState([&] { return shards.registered() == 1; }, absl::Seconds(2));
    if (registered) ctx.TryCancel();
  });
  v1::ShardCommand c;
  while (reader->Read(&c)) {
  }
  grpc::Status s = reader->Finish();
  cancel.join();
  return registered ? grpc::Status::OK : s;
}

TEST_CASE("only the job's servers register as shards: the peer secret, never the workers' token",
          "[service][auth][shards]") {
  CoordinatorShardsOptions so;
  so.shards = 2;
  for (const std::string& bad : {std::string(""), std::string("the-token"), std::string("not-the-peer")}) {
    CoordinatorShards shards(so);  // outlives the server and its Shard handlers
    Fixture f("the-token", "the-token");
    f.service->EnableShards(&shards, "the-peer");
    const grpc::Status refused = RegisterShard(f, shards, bad, "the-token");  // a worker, or a guess
    INFO(bad << ": " << refused.error_message());
    REQUIRE(refused.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    REQUIRE(absl::StrContains(refused.error_message(), "peer secret"));
    REQUIRE(shards.registered() == 0);
    REQUIRE(f.core->registry().Serialize().find("omnilearn_unauthenticated_total 1\n") != std::string::npos);
  }
  CoordinatorShards shards(so), loopback(so);
  Fixture f("the-token", "the-token");
  f.service->EnableShards(&shards, "the-peer");
  REQUIRE(RegisterShard(f, shards, "the-peer", "").ok());  // the peer secret alone: a server of the job
  // A shard of the previous release registers through the worker-facing service's alias,
  // under the same gate.
  CoordinatorShards old_shards(so);
  Fixture old("the-token", "the-token");
  old.service->EnableShards(&old_shards, "the-peer");
  REQUIRE(RegisterShard(old, old_shards, "the-token", "the-token", /*previous_release=*/true).error_code() ==
          grpc::StatusCode::UNAUTHENTICATED);
  REQUIRE(RegisterShard(old, old_shards, "the-peer", "", /*previous_release=*/true).ok());
  // Without a peer secret (a job on loopback alone) the call passes the workers' gate.
  Fixture g("the-token", "the-token");
  g.service->EnableShards(&loopback);
  REQUIRE(RegisterShard(g, loopback, "", "").error_code() == grpc::StatusCode::UNAUTHENTICATED);
  REQUIRE(RegisterShard(g, loopback, "", "the-token").ok());
  // A server of no sharded job checks the caller's credentials before saying so.
  CoordinatorShards unused(so);
  Fixture lone("the-token", "the-token");
  REQUIRE(RegisterShard(lone, unused, "", "").error_code() == grpc::StatusCode::UNAUTHENTICATED);
  REQUIRE(RegisterShard(lone, unused, "", "the-token").error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  for (const std::string& token : {std::string(""), std::string("the-token")}) {
    const grpc::StatusCode expected =
        token.empty() ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::FAILED_PRECONDITION;
    grpc::ClientContext norm_ctx, report_ctx;
    AddBearerToken(norm_ctx, token);
    AddBearerToken(report_ctx, token);
    v1::ShardNormTotal total;
    REQUIRE(v1::ServerPeers::NewStub(lone.channel)->StepNorm(&norm_ctx, v1::ShardNorm(), &total).error_code() ==
            expected);
    v1::ShardCheckpointsAck ack;
    REQUIRE(v1::ServerPeers::NewStub(lone.channel)
                ->ReportCheckpoints(&report_ctx, v1::ShardCheckpoints(), &ack)
                .error_code() == expected);
  }
  // A sharded coordinator takes checkpoint reports from its servers only, checked first.
  for (const std::string& peer : {std::string(""), std::string("the-peer")}) {
    grpc::ClientContext ctx;
    AddPeerToken(ctx, peer);
    AddBearerToken(ctx, "the-token");
    v1::ShardCheckpoints report;
    report.mutable_checkpoints()->set_newest_age_seconds(-1);  // a bad field, looked at after the credentials
    v1::ShardCheckpointsAck ack;
    const grpc::Status s = v1::ServerPeers::NewStub(f.channel)->ReportCheckpoints(&ctx, report, &ack);
    REQUIRE(s.error_code() == (peer.empty() ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::INVALID_ARGUMENT));
  }
}

// Every message of the peer plane, each with one field at its bound or past it, and bytes
// that are no message at all: what a caller may send to ServerPeers (and to the previous
// release's ParameterServer.Shard).
struct PeerCall {
  std::string name;
  std::string method;  // "/omnilearn.v1.Service/Method"
  std::string bytes;   // the request as sent
};

std::vector<PeerCall> PeerPlaneCalls() {
  std::vector<PeerCall> calls;
  const auto hello = [](const std::function<void(v1::ShardHello*)>& set) {
    v1::ShardHello h;
    h.set_address("shard:1");
    h.set_shards(2);
    h.set_partition_bytes(ShardMap::kAutoPartitionBytes);
    set(&h);
    return h.SerializeAsString();
  };
  const std::vector<std::pair<std::string, std::string>> hellos = {
      {"hello", hello([](v1::ShardHello*) {})},
      {"1000 checkpoints", hello([](v1::ShardHello* h) {
         for (int v = 1; v <= kMaxShardCheckpoints; ++v) h->add_checkpoint_versions(v);
       })},
      {"1001 checkpoints", hello([](v1::ShardHello* h) {
         for (int v = 0; v <= kMaxShardCheckpoints; ++v) h->add_checkpoint_versions(v);
       })},
      {"address at its bound",
       hello([](v1::ShardHello* h) { h->set_address(std::string(kMaxShardAddressBytes, 'a')); })},
      {"address past it",
       hello([](v1::ShardHello* h) { h->set_address(std::string(kMaxShardAddressBytes + 1, 'a')); })},
      {"address unprintable", hello([](v1::ShardHello* h) { h->set_address("shard\n:1"); })},
      {"no address", hello([](v1::ShardHello* h) { h->clear_address(); })},
      {"shards past any job", hello([](v1::ShardHello* h) { h->set_shards(~0u); })},
      {"negative partitions", hello([](v1::ShardHello* h) { h->set_partition_bytes(-1); })},
      {"slice past any job", hello([](v1::ShardHello* h) { h->set_index(~0u); })},
      {"another map", hello([](v1::ShardHello* h) { h->set_fingerprint(~0ull); })},
  };
  for (const auto& [name, bytes] : hellos) {
    calls.push_back({"Shard " + name, "/omnilearn.v1.ServerPeers/Shard", bytes});
    calls.push_back({"the old Shard " + name, "/omnilearn.v1.ParameterServer/Shard", bytes});
  }
  const auto norm = [](uint32_t index, double sum, uint64_t version) {
    v1::ShardNorm n;
    n.set_index(index);
    n.set_sum_squares(sum);
    n.set_version(version);
    return n.SerializeAsString();
  };
  calls.push_back({"StepNorm slice 1", "/omnilearn.v1.ServerPeers/StepNorm", norm(1, 1.0, 0)});
  calls.push_back({"StepNorm slice 0", "/omnilearn.v1.ServerPeers/StepNorm", norm(0, 1.0, 0)});
  calls.push_back({"StepNorm slice at the bound", "/omnilearn.v1.ServerPeers/StepNorm", norm(1u << 20, 1.0, 0)});
  calls.push_back({"StepNorm slice past it", "/omnilearn.v1.ServerPeers/StepNorm", norm(~0u, 1.0, ~0ull)});
  calls.push_back({"StepNorm NaN", "/omnilearn.v1.ServerPeers/StepNorm", norm(1, std::nan(""), 0)});
  calls.push_back({"StepNorm negative", "/omnilearn.v1.ServerPeers/StepNorm", norm(1, -1.0, 0)});
  const auto report = [](uint32_t index, double age, size_t error_bytes) {
    v1::ShardCheckpoints r;
    r.set_index(index);
    r.mutable_checkpoints()->set_newest_age_seconds(age);
    r.mutable_checkpoints()->set_last_error(std::string(error_bytes, 'e'));
    return r.SerializeAsString();
  };
  const std::string reports = "/omnilearn.v1.ServerPeers/ReportCheckpoints";
  calls.push_back({"ReportCheckpoints", reports, report(1, 1, 0)});
  calls.push_back({"ReportCheckpoints error at its bound", reports, report(1, 1, kMaxCheckpointErrorBytes)});
  calls.push_back({"ReportCheckpoints error past it", reports, report(1, 1, kMaxCheckpointErrorBytes + 1)});
  calls.push_back({"ReportCheckpoints age past a year", reports, report(1, 366.0 * 86400, 0)});
  calls.push_back({"ReportCheckpoints negative age", reports, report(1, -1, 0)});
  calls.push_back({"ReportCheckpoints slice past any job", reports, report(~0u, 1, 0)});
  const auto piece = [](uint64_t total, size_t bytes) {
    v1::ReplicaPiece p;
    p.set_index(1);
    p.set_version(1);
    p.set_total_bytes(total);
    p.set_data(std::string(bytes, 'r'));
    return p.SerializeAsString();
  };
  const std::string keep = "/omnilearn.v1.ServerPeers/KeepReplica";
  calls.push_back({"KeepReplica", keep, piece(4, 4)});
  calls.push_back({"KeepReplica past the bound", keep, piece(kMaxReplicaBytes + 1, 4)});
  calls.push_back({"KeepReplica pieces past their size", keep, piece(2, 4)});
  calls.push_back({"KeepReplica ended early", keep, piece(8, 4)});
  v1::ReplicaRequest fetch;
  fetch.set_index(~0u);
  calls.push_back(
      {"FetchReplica slice past any job", "/omnilearn.v1.ServerPeers/FetchReplica", fetch.SerializeAsString()});
  // Bytes that parse as no message: a field of tag 0, then a length past the end.
  for (const std::string& method : std::vector<std::string>{
           "/omnilearn.v1.ServerPeers/Shard", "/omnilearn.v1.ParameterServer/Shard",
           "/omnilearn.v1.ServerPeers/StepNorm", reports, keep, "/omnilearn.v1.ServerPeers/FetchReplica"}) {
    calls.push_back({"no message at " + method, method, std::string("\x00\xff\xff\xff\xff\x0f", 6)});
  }
  return calls;
}

// Sends `call` once (its request, then the end of the client's side) under the peer secret
// `peer` and the workers' `token`, each left out when empty; reads whatever comes back for
// at most 2 s. The call's status.
grpc::Status CallPeerPlane(const std::shared_ptr<grpc::Channel>& channel, const PeerCall& call, const std::string& peer,
                           const std::string& token) {
  grpc::ClientContext ctx;
  AddPeerToken(ctx, peer);
  AddBearerToken(ctx, token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  raw::Method method(call.method, raw::Method::Kind::kBidiStreaming, channel);
  std::unique_ptr<raw::ClientStream> stream = method.OpenBidi(channel.get(), &ctx);
  grpc::Slice slice(call.bytes);
  stream->Write(raw::Buffer(&slice, 1));
  stream->WritesDone();
  raw::Buffer reply;
  while (stream->Read(&reply)) {
  }
  return stream->Finish();
}

// Every call of PeerPlaneCalls() to `channel`, under each credential a caller may hold but
// the job's peer secret: each answered UNAUTHENTICATED. How many calls were made.
int ExpectEveryCallUnauthenticated(const std::shared_ptr<grpc::Channel>& channel) {
  int calls = 0;
  for (const PeerCall& call : PeerPlaneCalls()) {
    for (const auto& [peer, token] : std::vector<std::pair<std::string, std::string>>{
             {"", ""}, {"", "the-token"}, {"not-the-peer", "the-token"}, {"the-token", ""}}) {
      const grpc::Status s = CallPeerPlane(channel, call, peer, token);
      INFO(call.name << " with peer '" << peer << "', token '" << token << "': " << s.error_code() << " "
                     << s.error_message());
      REQUIRE(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      REQUIRE(absl::StrContains(s.error_message(), "peer secret"));
      ++calls;
    }
  }
  return calls;
}

std::string Counted(int calls) { return absl::StrCat("omnilearn_unauthenticated_total ", calls, "\n"); }

TEST_CASE("the peer plane without the peer secret: UNAUTHENTICATED and counted, whatever the call holds",
          "[service][auth][shards]") {
  CoordinatorShardsOptions so;
  so.shards = 2;
  SECTION("a sharded coordinator, serving") {
    CoordinatorShards shards(so);
    Fixture f("the-token", "the-token");
    f.service->EnableShards(&shards, "the-peer");
    const int calls = ExpectEveryCallUnauthenticated(f.channel);
    REQUIRE(shards.registered() == 0);
    REQUIRE(absl::StrContains(f.core->registry().Serialize(), Counted(calls)));
  }
  SECTION("a sharded coordinator, held while it resumes") {
    CoordinatorShards shards(so);
    Fixture f("the-token", "the-token");
    f.service->EnableShards(&shards, "the-peer");
    f.service->Hold();
    const int calls = ExpectEveryCallUnauthenticated(f.channel);
    REQUIRE(absl::StrContains(f.core->registry().Serialize(), Counted(calls)));
    // The secret's holder learns of the hold.
    REQUIRE(CallPeerPlane(f.channel, PeerPlaneCalls()[0], "the-peer", "").error_code() ==
            grpc::StatusCode::UNAVAILABLE);
  }
  SECTION("a shard server") {
    FakeClock clock;
    ShardCore shard({&clock, nullptr});
    ShardServerService service(&shard, absl::Seconds(10), "the-token", {}, v1::WIRE_DTYPE_BF16);
    service.peers().Enable(nullptr, "the-peer");
    grpc::ServerBuilder builder;
    builder.RegisterService(&service);
    builder.RegisterService(&service.peers());
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    const std::shared_ptr<grpc::Channel> channel = server->InProcessChannel(grpc::ChannelArguments());
    const int calls = ExpectEveryCallUnauthenticated(channel);
    REQUIRE(absl::StrContains(shard.registry().Serialize(), Counted(calls)));
    // The secret's holder is told that this is no coordinator, not how its hello reads.
    for (const PeerCall& call : PeerPlaneCalls()) {
      INFO(call.name);
      REQUIRE(CallPeerPlane(channel, call, "the-peer", "").error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    }
    shard.Shutdown();
    server->Shutdown();
  }
}

TEST_CASE("the peer plane's bounds stay for the holders of the peer secret", "[service][auth][shards]") {
  CoordinatorShardsOptions so;
  so.shards = 2;
  CoordinatorShards shards(so);
  Fixture f("the-token", "the-token");
  f.service->EnableShards(&shards, "the-peer");
  const std::vector<PeerCall> calls = PeerPlaneCalls();
  const auto answer = [&](const std::string& name) {
    for (const PeerCall& call : calls) {
      if (call.name == name) return CallPeerPlane(f.channel, call, "the-peer", "");
    }
    FAIL("no call " << name);
    return grpc::Status::OK;
  };
  const grpc::Status over = answer("Shard 1001 checkpoints");
  REQUIRE(over.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(absl::StrContains(over.error_message(), "keeps at most 1000"));
  REQUIRE(answer("the old Shard address past it").error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  const grpc::Status garbage = answer("no message at /omnilearn.v1.ServerPeers/StepNorm");
  REQUIRE(garbage.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(absl::StrContains(garbage.error_message(), "is not a omnilearn.v1.ShardNorm"));
  REQUIRE(answer("ReportCheckpoints error past it").error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(answer("StepNorm slice 0").error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  // A server that keeps no replicas says so to the secret's holders.
  REQUIRE(answer("KeepReplica").error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  REQUIRE(shards.registered() == 0);
  REQUIRE(absl::StrContains(f.core->registry().Serialize(), Counted(0)));
}

TEST_CASE("a slice's replica: kept by a server with the peer secret, fetched back whole, bounds held",
          "[service][shards][replica]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  ShardServerService service(&shard, absl::Seconds(10), "the-token", {}, v1::WIRE_DTYPE_BF16);
  ReplicaStore store(2);
  service.peers().Enable(nullptr, "the-peer", &store);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  builder.RegisterService(&service.peers());
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  const std::shared_ptr<grpc::Channel> channel = server->InProcessChannel(grpc::ChannelArguments());
  const PeerCalls calls{grpc::InsecureChannelCredentials(), "the-peer"};

  CheckpointState state;  // a slice of 3 pieces of a MiB and a half: the file travels in 5 pieces
  state.layout = *ModelLayout::Create({{"a@0", {400000}}, {"b@0", {400000}}, {"c@0", {400000}}});
  auto weights = std::make_shared<std::vector<float>>(state.layout.total_elements());
  std::iota(weights->begin(), weights->end(), 0.0f);
  state.weights = weights;
  state.mode = "sync";
  state.version = 12;
  state.slice = 2;
  const std::string bytes = *EncodeCheckpoint(state);
  REQUIRE(bytes.size() > 4 * kReplicaPieceBytes);
  REQUIRE(SendReplica(channel.get(), calls, 2, 12, 0xf1, bytes).ok());
  REQUIRE(store.Held().at(2) == std::vector<uint64_t>{12});
  absl::StatusOr<CheckpointState> back = FetchReplica(channel.get(), calls, 2, 12, 0xf1);
  REQUIRE(back.ok());
  REQUIRE(*back->weights == *weights);
  REQUIRE(back->slice == 2);
  REQUIRE(absl::IsNotFound(FetchReplica(channel.get(), calls, 2, 11, 0xf1).status()));
  REQUIRE(absl::IsNotFound(FetchReplica(channel.get(), calls, 2, 12, 0xf2).status()));  // another map's
  // Another version than the file's, and bytes that are no checkpoint, are not kept.
  REQUIRE(absl::IsInvalidArgument(SendReplica(channel.get(), calls, 2, 13, 0xf1, bytes)));
  REQUIRE(!SendReplica(channel.get(), calls, 2, 14, 0xf1, std::string(100, 'x')).ok());
  const PeerCalls outsider{grpc::InsecureChannelCredentials(), "not-the-peer"};
  REQUIRE(absl::IsUnauthenticated(SendReplica(channel.get(), outsider, 2, 12, 0xf1, bytes)));
  REQUIRE(absl::IsUnauthenticated(FetchReplica(channel.get(), outsider, 2, 12, 0xf1).status()));
  REQUIRE(store.Held().at(2) == std::vector<uint64_t>{12});
  shard.Shutdown();
  server->Shutdown();
}

TEST_CASE("replicas are sent one at a time, and of those given meanwhile only the newest", "[replica]") {
  absl::Mutex mu;
  bool release = false;
  std::vector<uint64_t> sent;
  ReplicaSender sender(
      [&](const std::string& to, int index, uint64_t version, uint64_t, const std::string& bytes) {
        // Checked on the test's thread, after.
        const bool right = to == "next:1" && index == 1 && DecodeCheckpoint(bytes)->version == version;
        absl::MutexLock lock(&mu);
        sent.push_back(right ? version : 0);
        mu.Await(absl::Condition(&release));
        return version == 3 ? absl::UnavailableError("refused") : absl::OkStatus();
      },
      nullptr);
  CheckpointState state;
  state.layout = *ModelLayout::Create({{"w@0", {2}}});
  state.weights = std::make_shared<const std::vector<float>>(std::vector<float>{1, 2});
  state.slice = 1;
  for (uint64_t v = 1; v <= 4; ++v) {
    state.version = v;
    sender.Keep("next:1", state, 0xf);
    if (v == 1) {  // the first is in flight before the others come
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](std::vector<uint64_t>* s) { return !s->empty(); }, &sent));
    }
  }
  {
    absl::MutexLock lock(&mu);
    release = true;
  }
  sender.Drain();
  REQUIRE(sent == std::vector<uint64_t>{1, 4});  // 2 and 3 were overtaken while 1 went
  REQUIRE(sender.sent() == 2);
  REQUIRE(sender.bytes_sent() > 0);
}

TEST_CASE("a held service answers every call UNAVAILABLE until it is opened", "[service]") {
  Fixture f;
  f.service->Hold();
  const std::vector<float> init(9, 1.0f);
  auto held = f.client->Join(Request(), f.layout, init);
  REQUIRE(absl::IsUnavailable(held.status()));
  REQUIRE(absl::StrContains(held.status().message(), "resuming"));
  REQUIRE(f.core->Snapshot().parameter_count == 0);
  f.service->Open();
  REQUIRE(f.client->Join(Request(), f.layout, init).ok());
}

// A push header of the joined session (batch 8, as the fixture's global batch).
v1::PushRequest SessionPushHeader(const worker::JoinReply& joined) {
  v1::PushRequest header;
  header.mutable_header()->set_worker_id(joined.worker_id);
  header.mutable_header()->set_session_secret(joined.session_secret);
  header.mutable_header()->set_batch_size(8);
  header.mutable_header()->set_compute_seconds(0.01);
  return header;
}

// A whole push, once the session's slot is free: a stream's slot is free once the
// server's handler has returned, which the client may learn of before it happens. The
// push must then be applied, and the model moved once.
void PushOnceSlotIsFree(Fixture& f, uint64_t id) {
  REQUIRE(AwaitState([&] { return !f.service->PushInFlight(id); }));
  absl::StatusOr<worker::PushReply> ok = f.client->Push(StepOf(id), f.layout, std::vector<float>(9, 1.0f));
  INFO(ok.status().ToString());
  REQUIRE(ok.ok());
  REQUIRE(ok->applied);
  REQUIRE(f.core->version() == 1);
}

TEST_CASE("one push in flight per session; its slot is freed when its stream ends", "[service]") {
  ServiceLimits limits;
  limits.stream_idle_timeout = absl::Minutes(10);  // never reached here: the slot stays held
  Fixture f("", "", limits);
  const std::vector<float> init(9, 1.0f);
  auto joined = f.JoinSigned(init);
  auto stub = v1::ParameterServer::NewStub(f.channel);
  const v1::PushRequest header = SessionPushHeader(*joined);
  // A stream that sends its header and then nothing: it holds the session's slot once the
  // server has read the header (the client's Write returns before that).
  grpc::ClientContext stalled_ctx;
  stalled_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  v1::PushResponse stalled_reply;
  auto stalled = stub->Push(&stalled_ctx, &stalled_reply);
  REQUIRE(stalled->Write(header));
  REQUIRE(AwaitState([&] { return f.service->PushInFlight(joined->worker_id); }));
  // A second push of the same session is refused (bounded memory: one gradient per session).
  grpc::ClientContext ctx;
  v1::PushResponse r;
  auto second = stub->Push(&ctx, &r);
  second->Write(header);
  second->WritesDone();
  const grpc::Status refused = second->Finish();
  REQUIRE(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  REQUIRE(absl::StrContains(refused.error_message(), "in flight"));
  // The client gives the stalled stream up: its slot is free again.
  stalled_ctx.TryCancel();
  REQUIRE(stalled->Finish().error_code() == grpc::StatusCode::CANCELLED);
  PushOnceSlotIsFree(f, joined->worker_id);
}

TEST_CASE("a slice sent again is let in beside a push whose stream still holds the session's slot", "[service]") {
  ServiceLimits limits;
  limits.stream_idle_timeout = absl::Minutes(10);
  Fixture f("", "", limits);
  auto joined = f.JoinSigned(std::vector<float>(9, 1.0f));
  auto stub = v1::ParameterServer::NewStub(f.channel);
  // The first sending, whose connection its worker lost and the server did not notice yet.
  grpc::ClientContext stalled_ctx;
  stalled_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  v1::PushResponse stalled_reply;
  auto stalled = stub->Push(&stalled_ctx, &stalled_reply);
  REQUIRE(stalled->Write(SessionPushHeader(*joined)));
  REQUIRE(AwaitState([&] { return f.service->PushInFlight(joined->worker_id); }));
  worker::PushedStep again = StepOf(joined->worker_id);
  again.resend = true;
  absl::StatusOr<worker::PushReply> r = f.client->Push(again, f.layout, std::vector<float>(9, 1.0f));
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->applied);
  REQUIRE(f.core->version() == 1);
  stalled_ctx.TryCancel();
  REQUIRE(stalled->Finish().error_code() == grpc::StatusCode::CANCELLED);
}

TEST_CASE("a stalled push stream is cancelled by the server and frees its slot", "[service]") {
  ServiceLimits limits;
  limits.stream_idle_timeout = absl::Seconds(60);
  Fixture f("", "", limits);
  const std::vector<float> init(9, 1.0f);
  auto joined = f.JoinSigned(init);
  auto stub = v1::ParameterServer::NewStub(f.channel);
  const v1::PushRequest header = SessionPushHeader(*joined);
  grpc::ClientContext stalled_ctx;
  stalled_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  v1::PushResponse stalled_reply;
  auto stalled = stub->Push(&stalled_ctx, &stalled_reply);
  REQUIRE(stalled->Write(header));
  REQUIRE(AwaitState([&] { return f.service->PushInFlight(joined->worker_id); }));
  // Nothing more is sent: once the server's clock passes the idle timeout it cancels the
  // stream (Finish returns then, long before the call's own deadline), and its slot is
  // free again.
  f.clock.Advance(absl::Seconds(61));
  REQUIRE(stalled->Finish().error_code() == grpc::StatusCode::CANCELLED);
  PushOnceSlotIsFree(f, joined->worker_id);
}

TEST_CASE("bfloat16 on the wire: half the bytes, float32 master weights on the server", "[service][bf16]") {
  Fixture f("", "", {}, 1, v1::WIRE_DTYPE_BF16);
  const std::vector<float> init(9, 1.001f);                 // not a bfloat16 value: it rounds to 1
  auto joined = f.client->Join(Request(), f.layout, init);  // the client offers bfloat16
  REQUIRE(joined.ok());
  f.client->SetSessionSecret(joined->session_secret);
  std::vector<float> weights(9);
  REQUIRE(f.client->Pull(joined->worker_id, ~0ull, f.layout, absl::MakeSpan(weights)).ok());
  REQUIRE(weights == std::vector<float>(9, 1.0f));                    // what the wire carried
  REQUIRE(*f.core->Pull(joined->worker_id, ~0ull)->weights == init);  // what the server keeps
  auto reply = f.client->Push(StepOf(joined->worker_id), f.layout, std::vector<float>(9, 0.5f));  // exact in bf16
  REQUIRE(reply.ok());
  REQUIRE(reply->applied);
  // The step in float32 on the master weights: 1.001 - 1 * (8/8) * 0.5.
  REQUIRE(*f.core->Pull(joined->worker_id, ~0ull)->weights == std::vector<float>(9, 1.001f - 0.5f));
  REQUIRE(f.core->registry().Serialize().find("omnilearn_push_bytes_total 18\n") != std::string::npos);
  // A worker that does not offer bfloat16 (of a release before it) gets float32 in the
  // same job.
  Fixture g("", "", {}, 1, v1::WIRE_DTYPE_BF16);
  worker::ClientOptions float32_only = WithToken("");
  float32_only.offer_bfloat16 = false;
  auto plain_client = worker::MakeGrpcPsClient(g.channel, float32_only);
  auto plain = plain_client->Join(Request(), g.layout, init);
  REQUIRE(plain.ok());
  plain_client->SetSessionSecret(plain->session_secret);
  REQUIRE(plain_client->Pull(plain->worker_id, ~0ull, g.layout, absl::MakeSpan(weights)).ok());
  REQUIRE(weights == init);
}

TEST_CASE("a server without --wire_dtype=bf16 refuses bfloat16 pushes and pulls", "[service][bf16]") {
  Fixture f;
  const std::vector<float> init(9, 1.0f);
  auto joined = f.client->Join(Request(), f.layout, init);  // bfloat16 offered, not taken
  REQUIRE(joined.ok());
  f.client->SetSessionSecret(joined->session_secret);
  REQUIRE(f.client->Push(StepOf(joined->worker_id), f.layout, std::vector<float>(9, 0.5f)).ok());
  REQUIRE(f.core->registry().Serialize().find("omnilearn_push_bytes_total 36\n") != std::string::npos);
  auto stub = v1::ParameterServer::NewStub(f.channel);
  v1::PushRequest bad = SessionPushHeader(*joined);
  bad.mutable_header()->set_wire_dtype(v1::WIRE_DTYPE_BF16);
  grpc::ClientContext ctx;
  v1::PushResponse r;
  auto w = stub->Push(&ctx, &r);
  w->Write(bad);
  w->WritesDone();
  const grpc::Status refused = w->Finish();
  REQUIRE(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(absl::StrContains(refused.error_message(), "wire dtype WIRE_DTYPE_BF16"));
  grpc::ClientContext pull_ctx;
  v1::PullRequest pull;
  pull.set_worker_id(joined->worker_id);
  pull.set_session_secret(joined->session_secret);
  pull.set_wire_dtype(v1::WIRE_DTYPE_BF16);
  auto reader = stub->Pull(&pull_ctx, pull);
  v1::PullResponse ignored;
  while (reader->Read(&ignored)) {
  }
  REQUIRE(reader->Finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(f.core->version() == 1);  // the float32 push only
}

TEST_CASE("a join waiting at the start barrier is not taken for a stalled stream", "[service]") {
  ServiceLimits limits;
  limits.stream_idle_timeout = absl::Seconds(60);
  Fixture f("", "", limits, /*num_workers=*/2);
  const std::vector<float> init(9, 1.0f);
  absl::StatusOr<worker::JoinReply> first;
  std::thread waiting([&] { first = f.client->Join(Request(), f.layout, init); });
  // The first join is read and waits for the second worker: its stream is not watched.
  REQUIRE(AwaitState([&] { return f.core->Snapshot().workers.size() == 1 && f.service->WatchedStreams() == 0; }));
  // Long past the idle timeout on the server's clock; a stalled stream would be cancelled
  // now (the test above), this one is not.
  f.clock.Advance(absl::Minutes(5));
  worker::JoinRequest second = Request();
  second.worker.name = "w1";
  second.has_initial_parameters = false;
  auto client2 = worker::MakeGrpcPsClient(f.channel, WithToken(""));
  REQUIRE(client2->Join(second, f.layout, {}).ok());
  waiting.join();
  INFO(first.status().ToString());
  REQUIRE(first.ok());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a shard server's service serves slices only: the control calls send workers to the coordinator",
          "[service][shard]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  ShardServerService service(&shard, absl::Seconds(10), "token", {}, v1::WIRE_DTYPE_BF16);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  auto stub = v1::ParameterServer::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  const std::string line = "this is a shard server: workers join the job's coordinator, whose answer names the shards";
  const auto with_token = [](grpc::ClientContext* ctx) { AddBearerToken(*ctx, "token"); };
  {
    grpc::ClientContext ctx;
    with_token(&ctx);
    v1::JoinResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::JoinRequest>> writer = stub->Join(&ctx, &response);
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    REQUIRE(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    REQUIRE(s.error_message() == line);
  }
  {
    grpc::ClientContext ctx;
    with_token(&ctx);
    v1::HeartbeatResponse response;
    const grpc::Status s = stub->Heartbeat(&ctx, v1::HeartbeatRequest(), &response);
    REQUIRE(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    REQUIRE(s.error_message() == line);
  }
  {
    grpc::ClientContext ctx;
    with_token(&ctx);
    v1::LeaveResponse response;
    REQUIRE(stub->Leave(&ctx, v1::LeaveRequest(), &response).error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext ctx;
    with_token(&ctx);
    v1::GetStatusResponse response;
    REQUIRE(stub->GetStatus(&ctx, v1::GetStatusRequest(), &response).error_code() ==
            grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    // Without the workers' token, the control calls are refused for it, before the role.
    grpc::ClientContext join_ctx, beat_ctx, leave_ctx, status_ctx;
    v1::JoinResponse joined;
    std::unique_ptr<grpc::ClientWriter<v1::JoinRequest>> writer = stub->Join(&join_ctx, &joined);
    writer->WritesDone();
    REQUIRE(writer->Finish().error_code() == grpc::StatusCode::UNAUTHENTICATED);
    v1::HeartbeatResponse beat;
    REQUIRE(stub->Heartbeat(&beat_ctx, v1::HeartbeatRequest(), &beat).error_code() ==
            grpc::StatusCode::UNAUTHENTICATED);
    v1::LeaveResponse left;
    REQUIRE(stub->Leave(&leave_ctx, v1::LeaveRequest(), &left).error_code() == grpc::StatusCode::UNAUTHENTICATED);
    v1::GetStatusResponse status;
    REQUIRE(stub->GetStatus(&status_ctx, v1::GetStatusRequest(), &status).error_code() ==
            grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    // The slice calls pass the same gate as the coordinator's: the workers' token first.
    grpc::ClientContext ctx;
    v1::PullRequest request;
    std::unique_ptr<grpc::ClientReader<v1::PullResponse>> reader = stub->Pull(&ctx, request);
    v1::PullResponse r;
    REQUIRE_FALSE(reader->Read(&r));
    REQUIRE(reader->Finish().error_code() == grpc::StatusCode::UNAUTHENTICATED);
  }
  shard.Shutdown();
  server->Shutdown();
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
