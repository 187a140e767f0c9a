// The gRPC adapter end to end over an in-process channel (no ports): the real client,
// the real service, the real core.
#include "server/service.h"

#include <grpcpp/grpcpp.h>

#include "catch2/catch.hpp"
#include "common/tensor_codec.h"
#include "worker/ps_client.h"

namespace omnilearn {
namespace server {
namespace {

struct Fixture {
  Fixture() {
    ServerOptions o;
    o.mode = Mode::kAsync;
    o.controller.global_batch = 8;
    o.optimizer.learning_rate = 1.0;
    o.optimizer.momentum = 0;
    o.optimizer.weight_decay = 0;
    core = std::move(*ParameterServerCore::Create(o));
    service = std::make_unique<ParameterServerService>(core.get(), absl::Seconds(10));
    grpc::ServerBuilder builder;
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    grpc::ChannelArguments args;
    channel = server->InProcessChannel(args);
    client = worker::MakeGrpcPsClient(channel, absl::Seconds(10));
    layout = *ModelLayout::Create({{"w", {2, 3}}, {"b", {3}}});
  }
  ~Fixture() {
    core->Shutdown();
    server->Shutdown();
  }
  std::unique_ptr<ParameterServerCore> core;
  std::unique_ptr<ParameterServerService> service;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<worker::PsClient> client;
  ModelLayout layout;
};

v1::JoinHeader Header(const ModelLayout& layout) {
  v1::JoinHeader h;
  h.set_name("w0");
  h.set_has_initial_parameters(true);
  *h.mutable_layout() = LayoutToProto(layout);
  return h;
}

TEST_CASE("join, pull, push and status over gRPC", "[service]") {
  Fixture f;
  const std::vector<float> init = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto joined = f.client->Join(Header(f.layout), f.layout, &init);
  REQUIRE(joined.ok());
  REQUIRE(joined->batch_size() == 8);
  std::vector<float> weights;
  auto version = f.client->Pull(joined->worker_id(), ~0ull, f.layout, &weights);
  REQUIRE(version.ok());
  REQUIRE(weights == init);
  // Up to date: no chunks, the vector is left alone.
  std::vector<float> untouched;
  REQUIRE(f.client->Pull(joined->worker_id(), *version, f.layout, &untouched).ok());
  REQUIRE(untouched.empty());

  v1::PushHeader push;
  push.set_worker_id(joined->worker_id());
  push.set_batch_size(8);
  push.set_compute_seconds(0.01);
  push.set_model_version(0);
  auto reply = f.client->Push(push, f.layout, std::vector<float>(9, 1.0f));
  REQUIRE(reply.ok());
  REQUIRE(reply->applied());
  REQUIRE(reply->model_version() == 1);
  REQUIRE(reply->action() == v1::ACTION_PULL);
  REQUIRE(f.client->Pull(joined->worker_id(), 0, f.layout, &weights).ok());
  REQUIRE(weights[0] == 0.0f);  // 1 - lr * (8/8) * 1

  auto stub = v1::ParameterServer::NewStub(f.channel);
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  REQUIRE(stub->GetStatus(&ctx, v1::GetStatusRequest(), &status).ok());
  REQUIRE(status.model_version() == 1);
  REQUIRE(status.workers_size() == 1);
  REQUIRE(status.parameter_count() == 9);
}

TEST_CASE("bad pushes get clear statuses and leave the model unchanged", "[service]") {
  Fixture f;
  const std::vector<float> init(9, 0.5f);
  auto joined = f.client->Join(Header(f.layout), f.layout, &init);
  REQUIRE(joined.ok());
  v1::PushHeader push;
  push.set_worker_id(joined->worker_id());
  push.set_batch_size(8);
  push.set_compute_seconds(0.01);

  // A gradient for another model: the layout the client chunks with differs.
  const ModelLayout other = *ModelLayout::Create({{"w", {3, 3}}});
  auto wrong = f.client->Push(push, other, std::vector<float>(9, 1.0f));
  REQUIRE(wrong.status().code() == absl::StatusCode::kInvalidArgument);
  std::vector<float> nan(9, 1.0f);
  nan[4] = NAN;
  REQUIRE(f.client->Push(push, f.layout, nan).status().code() == absl::StatusCode::kInvalidArgument);
  push.set_worker_id(77);
  REQUIRE(f.client->Push(push, f.layout, std::vector<float>(9, 1.0f)).status().code() ==
          absl::StatusCode::kNotFound);

  std::vector<float> weights;
  REQUIRE(f.client->Pull(joined->worker_id(), ~0ull, f.layout, &weights).ok());
  REQUIRE(weights == init);
  const ServerSnapshot s = f.core->Snapshot();
  REQUIRE(s.version == 0);
  REQUIRE(s.pushes_by_result.at("invalid") == 2);
  REQUIRE(s.pushes_by_result.at("unknown_worker") == 1);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
