#include "server/rpc/service.h"

#include <algorithm>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_chunks.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "server/control/join_check.h"
#include "server/rpc/shard_wire.h"

namespace omnilearn {
namespace server {
namespace {

v1::Mode ToProto(Mode m) {
  switch (m) {
    case Mode::kSync:
      return v1::MODE_SYNC;
    case Mode::kAsync:
      return v1::MODE_ASYNC;
    case Mode::kSsp:
      return v1::MODE_SSP;
  }
  return v1::MODE_UNSPECIFIED;
}

v1::DeviceKind ToProto(Device d) {
  switch (d) {
    case Device::kCpu:
      return v1::DEVICE_CPU;
    case Device::kCuda:
      return v1::DEVICE_CUDA;
    default:
      return v1::DEVICE_UNSPECIFIED;
  }
}

Device FromProto(v1::DeviceKind d) {
  switch (d) {
    case v1::DEVICE_CPU:
      return Device::kCpu;
    case v1::DEVICE_CUDA:
      return Device::kCuda;
    default:
      return Device::kUnknown;
  }
}

v1::WorkerState ToProto(WorkerState s) {
  switch (s) {
    case WorkerState::kActive:
    case WorkerState::kPending:
      return v1::WORKER_STATE_ACTIVE;
    case WorkerState::kDropped:
      return v1::WORKER_STATE_DROPPED;
    case WorkerState::kLeft:
      return v1::WORKER_STATE_LEFT;
  }
  return v1::WORKER_STATE_UNSPECIFIED;
}

}  // namespace

void ConfigureServerBuilder(grpc::ServerBuilder& builder, int max_threads) {
  // A second server on a busy port must fail, not share it (gRPC allows SO_REUSEPORT by
  // default, which would split the workers between two servers).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // A shard's link pings its coordinator every 5 s, with or without data, to notice a
  // host lost without closing its connections; a ping sooner than this would count
  // against the link, and a few of them would close it.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 4000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // And the server pings every caller's connection as often: a shard's stream on a host cut
  // off without closing its connections ends within 25 s (its slice is then named missing,
  // and the shard's return is a return), not when TCP gives up minutes later. The shard's
  // own link notices sooner (ShardLinkOptions::keepalive): it carries no bulk data.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  grpc::ResourceQuota quota("omnilearn_server");
  quota.SetMaxThreads(max_threads);
  builder.SetResourceQuota(quota);
}

ParameterServerService::ParameterServerService(ParameterServerCore* core, absl::Duration max_wait,
                                               std::string auth_token, ServiceLimits limits, v1::WireDtype wire_dtype)
    : SliceService(core, max_wait, std::move(auth_token), limits, wire_dtype), core_(core) {}

absl::Status ParameterServerService::Serving() const {
  // A sharded job whose slice is missing takes nothing (the workers wait in Join).
  return shards_ != nullptr ? shards_->Serving() : absl::OkStatus();
}

template <typename Request>
grpc::Status ParameterServerService::AuthorizeSession(const grpc::ServerContext* ctx, const Request& request) const {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  return ToGrpc(core_->Authenticate(request.worker_id(), request.session_secret()));
}

grpc::Status ParameterServerService::Join(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                                          v1::JoinResponse* response) {
  bool asked_for_model = false;
  grpc::Status s = JoinCall(ctx, reader, response, &asked_for_model);
  // A refused join is the operator's to see (a wrong token, another model...), except an
  // ask for the worker's model (the session then sends it).
  if (!s.ok() && !asked_for_model) {
    if (std::optional<std::string> line =
            refused_joins_.Line("a join", ctx->peer(), static_cast<absl::StatusCode>(s.error_code()), s.error_message(),
                                data_->clock().Now())) {
      data_->Log(*line);
    }
  }
  return s;
}

namespace {

// The join's worker as the core takes it, from its header and parsed layout.
JoinInfo JoinInfoFrom(const v1::JoinHeader& header, ModelLayout layout) {
  JoinInfo info;
  info.name = header.name();
  info.host = header.host();
  info.device = FromProto(header.device());
  info.max_batch = header.max_batch_size();
  info.dataset_size = header.dataset_size();
  info.job_samples = header.job_samples();
  info.takes_local_steps = header.takes_local_steps();
  info.resume_id = header.resume_worker_id();
  info.resume_secret = header.resume_secret();
  info.layout = std::move(layout);
  return info;
}

// JoinHeader.optimizer as the core takes it; InvalidArgument for a kind this server
// cannot run (a worker of a later release), naming those it can.
absl::StatusOr<WantedOptimizer> WantedOptimizerFrom(const v1::OptimizerSpec& p) {
  WantedOptimizer o;
  const std::optional<OptimizerKind> kind = OptimizerKindFromProto(p.kind());
  if (!kind.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("the worker's optimizer (kind ", static_cast<int>(p.kind()),
                                                   ") is not one this server runs: ", OptimizerNames()));
  }
  o.kind = *kind;
  o.lr = p.lr();
  o.momentum = p.momentum();
  o.weight_decay = p.weight_decay();
  o.beta1 = p.beta1();
  o.beta2 = p.beta2();
  o.eps = p.eps();
  o.hyper = HyperMap(p.options().begin(), p.options().end());
  for (const v1::ParamGroup& g : p.groups()) {
    o.groups.push_back({{g.tensors().begin(), g.tensors().end()},
                        g.lr(),
                        g.weight_decay(),
                        HyperMap(g.options().begin(), g.options().end())});
  }
  return o;
}

}  // namespace

grpc::Status ParameterServerService::JoinCall(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                                              v1::JoinResponse* response, bool* asked_for_model) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  StreamWatch watch(&admission_, ctx);
  v1::JoinRequest msg;
  if (!reader->Read(&msg) || !msg.has_header()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Join must start with a header");
  }
  const v1::JoinHeader header = msg.header();
  absl::StatusOr<ModelLayout> layout = ParseLayout(header.layout());
  if (!layout.ok()) return ToGrpc(layout.status());
  // Before anything is allocated for the parameters the join may bring.
  if (absl::Status s = core_->CheckJoinHeader(header.name(), header.host(), *layout); !s.ok()) return ToGrpc(s);
  JoinInfo info = JoinInfoFrom(header, *std::move(layout));
  if (header.has_optimizer()) {
    absl::StatusOr<WantedOptimizer> optimizer = WantedOptimizerFrom(header.optimizer());
    if (!optimizer.ok()) return ToGrpc(optimizer.status());
    info.optimizer = *std::move(optimizer);
  }
  if (grpc::Status s = ReadInitialParameters(ctx, reader, &watch, header, &info); !s.ok()) return s;
  watch.Done();  // read: the start barrier may keep the call waiting for minutes
  std::optional<ShardMap> map;
  if (shards_ != nullptr) {
    absl::StatusOr<ShardMap> m = JoinSliceZero(ctx, &info);
    if (!m.ok()) return ToGrpc(m.status());
    map = *std::move(m);
  }
  const std::string name = info.name;
  absl::StatusOr<JoinResult> r = core_->Join(std::move(info), Deadline(ctx));
  if (shards_ != nullptr) shards_->ForgetInitial(name);  // adopted (the shards have their slices) or not
  if (AsksForModel(r.status())) {
    *asked_for_model = true;
    if (!header.accepts_send_model()) return ToGrpc(r.status());  // a worker of an earlier release
    response->set_send_model(true);                               // no session: the worker joins again with its model
    response->set_message(std::string(r.status().message()));
    return grpc::Status::OK;
  }
  if (!r.ok()) return ToGrpc(r.status());
  if (map.has_value()) ShardMapToProto(shards_->Answer(*map), response->mutable_shard_map());
  FillJoinResponse(*r, header, response);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::ReadInitialParameters(grpc::ServerContext* ctx,
                                                           grpc::ServerReader<v1::JoinRequest>* reader,
                                                           StreamWatch* watch, const v1::JoinHeader& header,
                                                           JoinInfo* info) {
  // A model upload holds up to --max_model_bytes: only a few at once, each in its turn. The
  // slot is freed on return: the core's wait for the others holds none.
  bool uploading = false;
  absl::Cleanup release = [&] {
    if (uploading) admission_.EndJoinUpload();
  };
  std::optional<ChunkAssembler> assembler;
  bool any_chunk = false;
  v1::JoinRequest msg;
  while (reader->Read(&msg)) {
    watch->Touch();
    if (!msg.has_chunk()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Join: a second header");
    if (!assembler) {
      if (!admission_.BeginJoinUpload(Deadline(ctx))) {
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "other joins are uploading models: retry");
      }
      uploading = true;
      assembler.emplace(&info->layout);
    }
    if (absl::Status s = assembler->Add(msg.chunk()); !s.ok()) return ToGrpc(s);
    any_chunk = true;
  }
  if (!header.has_initial_parameters() && !any_chunk) return grpc::Status::OK;
  if (!assembler) assembler.emplace(&info->layout);  // no chunks: Finish says what is missing
  absl::StatusOr<std::vector<float>> values = assembler->Finish();
  if (!values.ok()) return ToGrpc(values.status());
  info->initial_parameters = std::move(*values);
  return grpc::Status::OK;
}

void ParameterServerService::FillJoinResponse(const JoinResult& r, const v1::JoinHeader& header,
                                              v1::JoinResponse* response) const {
  response->set_action(ActionToProto(r.action));
  if (r.action == Action::kStop) {
    response->set_job_finished(r.job_finished);
    response->set_finished_version(r.version);
    response->set_global_samples(r.global_samples);
    return;
  }
  response->set_worker_id(r.id);
  response->set_lease_seconds(absl::ToDoubleSeconds(r.lease));
  response->set_mode(ToProto(r.mode));
  response->set_local_steps(static_cast<uint32_t>(r.local_steps));
  response->set_local_batch(r.local_batch);
  response->set_batch_size(r.batch);
  response->set_global_samples(r.global_samples);
  SamplesToProto(r.samples, response->mutable_samples());
  response->set_idle(r.idle);
  response->set_session_secret(r.secret);
  const auto& offered = header.wire_dtypes();
  if (wire_dtype_ != v1::WIRE_DTYPE_F32 && std::find(offered.begin(), offered.end(), wire_dtype_) != offered.end()) {
    response->set_wire_dtype(wire_dtype_);
  }
  response->set_push_trailer(true);  // sharded too: each slice's stream carries its pieces, then a trailer
}

absl::StatusOr<ShardMap> ParameterServerService::JoinSliceZero(grpc::ServerContext* ctx, JoinInfo* info) {
  if (absl::Status s = shards_->AwaitShards(Deadline(ctx)); !s.ok()) return s;
  if (std::optional<ModelLayout> job = shards_->job_layout();
      job.has_value() && *job != info->layout && !core_->NextJoinStartsNewJob()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the worker's model differs from the job's: ", info->layout.DescribeDifference(*job)));
  }
  const std::optional<OptimizerKind> brought =
      info->optimizer.has_value() ? std::optional<OptimizerKind>(info->optimizer->kind) : std::nullopt;
  absl::StatusOr<ShardMap> map = shards_->PlanFor(info->layout, brought);
  if (!map.ok()) return map.status();
  if (info->optimizer.has_value()) {  // its groups name the whole model's tensors: checked before the slice
    absl::StatusOr<OptimizerOptions> whole = MirrorOptimizer(*info->optimizer, OptimizerOptions(), info->layout);
    if (!whole.ok()) return whole.status();
    if (RuleOf(info->optimizer->kind).whole_tensors && !map->whole_tensors()) {
      return absl::FailedPreconditionError(absl::StrCat(
          RuleOf(info->optimizer->kind).torch_class,
          "'s step reads whole tensors, and this sharded job's map of the model, made for its optimizer, cuts "
          "tensors: bring the job's optimizer, or none"));
    }
  }
  if (info->initial_parameters.has_value()) {
    auto whole = std::make_shared<const std::vector<float>>(std::move(*info->initial_parameters));
    std::vector<float> slice(map->slice_elements(0));
    map->Gather(0, *whole, absl::MakeSpan(slice));
    info->initial_parameters = std::move(slice);
    shards_->StashInitial(info->name, info->layout, *map, std::move(whole));
  }
  info->layout = map->slice_layout(0);
  return map;
}

grpc::Status ParameterServerService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
                                               v1::HeartbeatResponse* response) {
  if (grpc::Status s = AuthorizeSession(ctx, *request); !s.ok()) return s;
  response->set_action(ActionToProto(core_->Heartbeat(request->worker_id())));
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* request,
                                           v1::LeaveResponse*) {
  if (grpc::Status s = AuthorizeSession(ctx, *request); !s.ok()) return s;
  return ToGrpc(core_->Leave(request->worker_id(), request->finished()));
}

namespace {

void ShardToProto(const CoordinatorShards::ShardInfo& info, v1::ShardStatus* out) {
  out->set_index(static_cast<uint32_t>(info.index));
  out->set_address(info.address);
  out->set_connected(info.connected);
  out->set_slice_bytes(info.slice_bytes);
  out->set_steps_sent(info.steps_sent);
  out->set_queued_commands(static_cast<uint32_t>(info.queued));
  out->set_missing_seconds(absl::ToDoubleSeconds(info.missing_for));
  if (info.checkpoints.has_value()) *out->mutable_checkpoints() = CheckpointsToProto(*info.checkpoints);
}

void WorkerToProto(const WorkerSnapshot& w, v1::WorkerStatus* ws) {
  ws->set_worker_id(w.id);
  ws->set_name(w.name);
  ws->set_host(w.host);
  ws->set_device(ToProto(w.device));
  ws->set_state(ToProto(w.state));
  ws->set_batch_size(w.batch);
  ws->set_last_compute_seconds(w.last_compute_seconds);
  ws->set_mean_compute_seconds(w.mean_compute_seconds);
  ws->set_iterations(w.iterations);
  ws->set_samples(w.samples);
  ws->set_emulation_overruns(w.emulation_overruns);
  ws->set_predicted_seconds(w.predicted_seconds);
  ws->set_max_batch_size(w.max_batch);
  ws->set_last_train_loss(w.last_loss);
  ws->set_last_model_version(w.last_version);
}

}  // namespace

grpc::Status ParameterServerService::GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest*,
                                               v1::GetStatusResponse* response) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  const ServerSnapshot s = core_->Snapshot();
  response->set_mode(ToProto(s.mode));
  response->set_model_version(s.version);
  response->set_global_batch_size(s.global_batch);
  response->set_controller(s.controller);
  response->set_uptime_seconds(s.uptime_seconds);
  response->set_last_train_loss(s.last_train_loss);
  if (s.test_accuracy) response->set_test_accuracy(*s.test_accuracy);
  response->set_controller_adjustments(s.adjustments);
  response->set_parameter_count(s.parameter_count);
  response->set_job_finished(s.job_finished);
  response->set_dataset_size(s.dataset_size);
  response->set_global_samples(s.global_samples);
  response->set_predicted_spread(s.predicted_spread);
  response->set_plan_changes(s.plan_changes);
  response->set_job(s.job);
  response->set_test_accuracy_version(s.test_accuracy_version);
  response->set_accuracy_is_validation(s.accuracy_is_validation);
  response->set_rounds(s.rounds);
  if (shards_ != nullptr) {
    for (const CoordinatorShards::ShardInfo& info : shards_->Shards()) ShardToProto(info, response->add_shards());
  }
  if (checkpoints_ != nullptr) *response->mutable_checkpoints() = CheckpointsToProto(checkpoints_->View());
  for (const WorkerSnapshot& w : s.workers) WorkerToProto(w, response->add_workers());
  return grpc::Status::OK;
}

}  // namespace server
}  // namespace omnilearn
