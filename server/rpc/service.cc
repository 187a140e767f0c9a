#include "server/rpc/service.h"

#include <algorithm>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_chunks.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "server/control/join_check.h"

namespace omnilearn {
namespace server {
namespace {

v1::Action ToProto(Action a) {
  switch (a) {
    case Action::kContinue:
      return v1::ACTION_CONTINUE;
    case Action::kRejoin:
      return v1::ACTION_REJOIN;
    case Action::kStop:
      return v1::ACTION_STOP;
  }
  return v1::ACTION_UNSPECIFIED;
}

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

void SamplesToProto(const SampleBatch& batch, google::protobuf::RepeatedPtrField<v1::SampleSpan>* out) {
  for (const SampleSpan& span : batch) {
    v1::SampleSpan* s = out->Add();
    s->set_epoch(span.epoch);
    s->mutable_ids()->Add(span.ids.begin(), span.ids.end());
  }
}

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

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
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  grpc::ResourceQuota quota("omnilearn_server");
  quota.SetMaxThreads(max_threads);
  builder.SetResourceQuota(quota);
}

ParameterServerService::ParameterServerService(ParameterServerCore* core, absl::Duration max_wait,
                                               std::string auth_token, ServiceLimits limits, v1::WireDtype wire_dtype)
    : ParameterServerService(core, core, max_wait, std::move(auth_token), limits, wire_dtype) {}

ParameterServerService::ParameterServerService(ShardCore* shard, absl::Duration max_wait, std::string auth_token,
                                               ServiceLimits limits, v1::WireDtype wire_dtype)
    : ParameterServerService(shard, nullptr, max_wait, std::move(auth_token), limits, wire_dtype) {}

ParameterServerService::ParameterServerService(DataPlane* data, ParameterServerCore* core, absl::Duration max_wait,
                                               std::string auth_token, ServiceLimits limits, v1::WireDtype wire_dtype)
    : data_(data),
      core_(core),
      max_wait_(max_wait),
      auth_token_(std::move(auth_token)),
      wire_dtype_(wire_dtype),
      admission_(&data->clock(), limits) {
  // The model-carrying methods, by their index in the service (the generated code adds
  // them in the proto's order), as streams of raw buffers. A server-streaming Pull served
  // as a bidirectional stream reads its one request itself; the wire is the same.
  const google::protobuf::ServiceDescriptor* d =
      v1::PullRequest::descriptor()->file()->FindServiceByName("ParameterServer");
  using Self = ParameterServerService;
  MarkMethodStreamed(d->FindMethodByName("Pull")->index(),
                     raw::BidiHandler(this, [](Self* s, grpc::ServerContext* ctx, RawStream* stream) {
                       return s->PullRaw(ctx, stream);
                     }));
  MarkMethodStreamed(d->FindMethodByName("Push")->index(),
                     raw::UploadHandler<v1::PushResponse>(
                         this, [](Self* s, grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                                  v1::PushResponse* response) { return s->PushRaw(ctx, reader, response); }));
  MarkMethodStreamed(d->FindMethodByName("PushPull")->index(),
                     raw::BidiHandler(this, [](Self* s, grpc::ServerContext* ctx, RawStream* stream) {
                       return s->PushPullRaw(ctx, stream);
                     }));
  watchdog_ = std::thread([this] { admission_.CancelIdleStreamsUntilStopped(); });
}

ParameterServerService::~ParameterServerService() {
  admission_.Stop();
  watchdog_.join();
}

ParameterServerService::StreamWatch::StreamWatch(Admission* admission, grpc::ServerContext* ctx)
    : admission_(admission), id_(admission->Watch([ctx] { ctx->TryCancel(); })) {}

bool ParameterServerService::PushInFlight(WorkerId id) const { return admission_.UploadInFlight(id); }

absl::Duration ParameterServerService::WaitLeft(const grpc::ServerContext* ctx) const {
  return std::min(max_wait_, absl::FromChrono(ctx->deadline()) - absl::Now());
}

absl::Time ParameterServerService::Deadline(const grpc::ServerContext* ctx) const {
  // The client's deadline is in real time; the core waits in its own clock's time.
  return data_->clock().Now() + WaitLeft(ctx);
}

grpc::Status ParameterServerService::Held() const {
  if (open_.load()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is resuming from its checkpoint: retry");
}

grpc::Status ParameterServerService::Authorize(const grpc::ServerContext* ctx) const {
  if (grpc::Status held = Held(); !held.ok()) return held;
  if (auth_token_.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  auto it = md.find(kAuthorizationKey);
  if (it != md.end() && BearerTokenMatches(absl::string_view(it->second.data(), it->second.size()), auth_token_)) {
    return grpc::Status::OK;
  }
  data_->CountUnauthenticated();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      it == md.end() ? "no bearer token: pass --auth_token_file" : "wrong bearer token");
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
    const std::string peer = PeerHost(ctx->peer());
    const std::string cause = absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())),
                                           ": ", s.error_message().substr(0, 200));
    if (refused_joins_.ShouldLog(peer, cause, data_->clock().Now())) {
      data_->Log(absl::StrCat("refused a join from ", peer, ": ", cause, " (logged once a minute per cause and peer)"));
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
  info.resume_id = header.resume_worker_id();
  info.resume_secret = header.resume_secret();
  info.layout = std::move(layout);
  return info;
}

}  // namespace

grpc::Status ParameterServerService::JoinCall(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                                              v1::JoinResponse* response, bool* asked_for_model) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  if (core_ == nullptr) return NotTheCoordinator();
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
  if (map.has_value()) shards_->FillShardMap(*map, response->mutable_shard_map());
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
  response->set_action(ToProto(r.action));
  if (r.action == Action::kStop) {
    response->set_job_finished(r.job_finished);
    response->set_finished_version(r.version);
    response->set_global_samples(r.global_samples);
    return;
  }
  response->set_worker_id(r.id);
  response->set_lease_seconds(absl::ToDoubleSeconds(r.lease));
  response->set_mode(ToProto(r.mode));
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

absl::Status ParameterServerService::CheckWireDtype(v1::WireDtype dtype) const {
  if (dtype == v1::WIRE_DTYPE_F32 || dtype == wire_dtype_) return absl::OkStatus();
  const std::string name = v1::WireDtype_Name(dtype);
  return absl::InvalidArgumentError(absl::StrCat("wire dtype ", name.empty() ? absl::StrCat(dtype) : name,
                                                 ": this server takes float32",
                                                 wire_dtype_ == v1::WIRE_DTYPE_F32 ? "" : " and its --wire_dtype",
                                                 " (its Join response says which the session uses)"));
}

std::shared_ptr<const std::vector<uint16_t>> ParameterServerService::Bfloat16Of(
    const std::shared_ptr<const std::vector<float>>& weights) {
  absl::MutexLock lock(&bf16_mu_);
  if (bf16_source_ != weights) {
    auto values = std::make_shared<std::vector<uint16_t>>(weights->size());
    EncodeBfloat16(weights->data(), static_cast<int64_t>(weights->size()), values->data());
    bf16_source_ = weights;
    bf16_values_ = std::move(values);
  }
  return bf16_values_;
}

template <typename Envelope, typename Writer>
grpc::Status ParameterServerService::WriteModel(const ModelSnapshot& snap, int chunk_field, v1::WireDtype dtype,
                                                Writer* writer) {
  Envelope first;
  v1::PullHeader* header = first.mutable_header();
  header->set_model_version(snap.version);
  *header->mutable_layout() = LayoutToProto(snap.layout);
  header->set_up_to_date(snap.weights == nullptr);
  header->set_wire_dtype(dtype);
  if (!writer->Write(Serialize(first))) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  if (snap.weights == nullptr) return grpc::Status::OK;
  // The chunks' slices hold the snapshot (immutable), or its bfloat16 copy, until the
  // transport is done with them.
  auto write = [&](const grpc::ByteBuffer& b) { return writer->Write(b); };
  bool sent;
  if (dtype == v1::WIRE_DTYPE_BF16) {
    std::shared_ptr<const std::vector<uint16_t>> values = Bfloat16Of(snap.weights);
    sent = ForEachChunkBuffer(chunk_field, snap.layout, values->data(), values, write, sizeof(uint16_t));
  } else {
    sent = ForEachChunkBuffer(chunk_field, snap.layout, snap.weights->data(), snap.weights, write);
  }
  if (!sent) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  data_->CountPullBytes(snap.layout.total_elements() * WireValueBytes(dtype));
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::PullRaw(grpc::ServerContext* ctx, RawStream* stream) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;  // before anything is read
  grpc::ByteBuffer in;
  v1::PullRequest request;
  if (!stream->Read(&in) || !grpc::SerializationTraits<v1::PullRequest>::Deserialize(&in, &request).ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Pull: no request, or a malformed one");
  }
  if (absl::Status s = data_->Authenticate(request.worker_id(), request.session_secret()); !s.ok()) return ToGrpc(s);
  if (absl::Status s = CheckWireDtype(request.wire_dtype()); !s.ok()) return ToGrpc(s);
  absl::StatusOr<ModelSnapshot> snap =
      data_->Pull(request.worker_id(), request.have_version(), request.min_version(), Deadline(ctx));
  if (!snap.ok()) return ToGrpc(snap.status());
  return WriteModel<v1::PullResponse>(*snap, kPullResponseChunkField, request.wire_dtype(), stream);
}

// Reads a push (its header, then the gradient's chunks) and hands it to the core.
// A push's chunks, then its trailer when the header asks for one. A PushPull's request
// stream has no end of its own before the reply: its chunks end when the layout is
// complete. A Push's stream is read to its end.
template <typename Stream>
absl::StatusOr<std::vector<float>> ParameterServerService::ReadGradient(Stream* stream, StreamWatch* watch,
                                                                        const v1::PushHeader& header,
                                                                        bool until_complete, PushInfo* info) {
  absl::StatusOr<ModelLayout> layout = data_->Layout();
  if (!layout.ok()) return layout.status();
  ChunkAssembler assembler(&*layout, data_->buffers().Take(), header.wire_dtype());
  grpc::ByteBuffer buffer;
  ReceivedMessage<v1::PushRequest> msg;
  bool trailer = false;
  while (!(until_complete && assembler.complete() && trailer == header.trailer()) && stream->Read(&buffer)) {
    watch->Touch();
    absl::Status s = msg.Parse(buffer, kPushRequestChunkField);
    if (!s.ok()) return s;
    if (msg.is_chunk()) {
      if (trailer) return absl::InvalidArgumentError("Push: a chunk after the trailer");
      if (s = assembler.Add(msg.chunk()); !s.ok()) return s;
    } else if (msg.message().has_trailer() && header.trailer() && !trailer && assembler.complete()) {
      trailer = true;
      info->compute_seconds = msg.message().trailer().compute_seconds();
      info->train_loss = msg.message().trailer().train_loss();
      if (msg.message().trailer().has_test_accuracy()) info->test_accuracy = msg.message().trailer().test_accuracy();
    } else {
      return absl::InvalidArgumentError(msg.message().has_trailer()
                                            ? "Push: a trailer before the gradient was complete or not announced"
                                            : "Push: a second header");
    }
  }
  if (trailer != header.trailer()) return absl::InvalidArgumentError("Push: the announced trailer never came");
  absl::StatusOr<std::vector<float>> g = assembler.Finish();
  if (!g.ok()) return g.status();
  data_->CountPushBytes(assembler.bytes_received());
  info->finite_checked = assembler.all_finite();  // when not, the core says which problem it is
  return g;
}

template <typename Stream>
absl::StatusOr<PushResult> ParameterServerService::ReadAndPush(grpc::ServerContext* ctx, Stream* stream,
                                                               bool until_complete, PushInfo* info,
                                                               v1::WireDtype* dtype) {
  StreamWatch watch(&admission_, ctx);
  grpc::ByteBuffer buffer;
  ReceivedMessage<v1::PushRequest> msg;
  if (!stream->Read(&buffer) || !msg.Parse(buffer, kPushRequestChunkField).ok() || !msg.message().has_header()) {
    data_->CountRejectedPush(0, "invalid");
    return absl::InvalidArgumentError("Push must start with a header");
  }
  const v1::PushHeader header = msg.message().header();
  // Before the gradient is read: a push for another worker's session goes no further.
  if (absl::Status s = data_->Authenticate(header.worker_id(), header.session_secret()); !s.ok()) {
    data_->CountRejectedPush(header.worker_id(), "unauthenticated");
    return s;
  }
  if (absl::Status s = CheckWireDtype(header.wire_dtype()); !s.ok()) {
    data_->CountRejectedPush(header.worker_id(), "invalid");
    return s;
  }
  *dtype = header.wire_dtype();
  // A sharded job whose slice is missing takes nothing (the workers wait in Join).
  if (shards_ != nullptr) {
    if (absl::Status s = shards_->Serving(); !s.ok()) return s;
  }
  // One push in flight per session: the gradients held are at most one model per worker.
  if (!admission_.BeginUpload(header.worker_id())) {
    data_->CountRejectedPush(header.worker_id(), "busy");
    return absl::ResourceExhaustedError(
        absl::StrCat("worker ", header.worker_id(), " has a push in flight already: one at a time"));
  }
  absl::Cleanup end_upload = [this, id = header.worker_id()] { admission_.EndUpload(id); };
  info->id = header.worker_id();
  info->batch = header.batch_size();
  info->compute_seconds = header.compute_seconds();
  info->version = header.model_version();
  info->train_loss = header.train_loss();
  if (header.has_test_accuracy()) info->test_accuracy = header.test_accuracy();
  info->out_of_memory = header.out_of_memory();
  info->communication_seconds = header.communication_seconds();
  info->shard_held_seconds = header.shard_held_seconds();
  info->report_only = header.report_only();
  info->idle = header.idle();
  info->emulation_overruns = header.emulation_overruns();
  std::vector<float> gradient;
  if (!info->out_of_memory && !info->report_only && !info->idle) {
    absl::StatusOr<std::vector<float>> g = ReadGradient(stream, &watch, header, until_complete, info);
    if (!g.ok()) {
      data_->CountRejectedPush(info->id, "invalid");
      return g.status();
    }
    gradient = std::move(*g);
  }
  watch.Done();  // read: a sync round or an ssp wait may keep the call waiting
  const absl::Time arrived = data_->clock().Now();
  absl::StatusOr<PushResult> r = data_->Push(*info, std::move(gradient), Deadline(ctx));
  if (r.ok()) r->held_seconds = absl::ToDoubleSeconds(data_->clock().Now() - arrived);
  return r;
}

void ParameterServerService::FillReply(const PushResult& r, v1::PushResponse* response) {
  response->set_action(ToProto(r.action));
  response->set_next_batch_size(r.next_batch);
  response->set_model_version(r.version);
  response->set_applied(r.applied);
  response->set_message(r.message);
  response->set_global_samples(r.global_samples);
  SamplesToProto(r.samples, response->mutable_samples());
  response->set_idle(r.idle);
  response->set_held_seconds(r.held_seconds);
}

grpc::Status ParameterServerService::PushRaw(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                                             v1::PushResponse* response) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  PushInfo info;
  v1::WireDtype dtype = v1::WIRE_DTYPE_F32;
  absl::StatusOr<PushResult> r = ReadAndPush(ctx, reader, /*until_complete=*/false, &info, &dtype);
  if (!r.ok()) return ToGrpc(r.status());
  FillReply(*r, response);
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::PushPullRaw(grpc::ServerContext* ctx, RawStream* stream) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  PushInfo info;
  v1::WireDtype dtype = v1::WIRE_DTYPE_F32;
  absl::StatusOr<PushResult> r = ReadAndPush(ctx, stream, /*until_complete=*/true, &info, &dtype);
  if (!r.ok()) return ToGrpc(r.status());
  v1::PushPullResponse out;
  FillReply(*r, out.mutable_reply());
  if (!stream->Write(Serialize(out))) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  if (r->action != Action::kContinue) return grpc::Status::OK;
  absl::StatusOr<ModelSnapshot> snap = data_->Pull(info.id, info.version, 0, Deadline(ctx));
  if (!snap.ok()) return ToGrpc(snap.status());
  return WriteModel<v1::PushPullResponse>(*snap, kPushPullResponseChunkField, dtype, stream);
}

absl::StatusOr<ShardMap> ParameterServerService::JoinSliceZero(grpc::ServerContext* ctx, JoinInfo* info) {
  if (absl::Status s = shards_->AwaitShards(Deadline(ctx)); !s.ok()) return s;
  if (std::optional<ModelLayout> job = shards_->job_layout(); job.has_value() && *job != info->layout) {
    return absl::InvalidArgumentError(
        absl::StrCat("the worker's model differs from the job's: ", info->layout.DescribeDifference(*job)));
  }
  absl::StatusOr<ShardMap> map = shards_->PlanFor(info->layout);
  if (!map.ok()) return map.status();
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

grpc::Status ParameterServerService::Shard(grpc::ServerContext* ctx, const v1::ShardHello* hello,
                                           grpc::ServerWriter<v1::ShardCommand>* writer) {
  return peers_.Shard(ctx, hello, writer);
}

grpc::Status ParameterServerService::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
                                               v1::HeartbeatResponse* response) {
  if (core_ == nullptr) return NotTheCoordinator();
  if (grpc::Status s = AuthorizeSession(ctx, *request); !s.ok()) return s;
  response->set_action(ToProto(core_->Heartbeat(request->worker_id())));
  return grpc::Status::OK;
}

grpc::Status ParameterServerService::Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* request,
                                           v1::LeaveResponse*) {
  if (core_ == nullptr) return NotTheCoordinator();
  if (grpc::Status s = AuthorizeSession(ctx, *request); !s.ok()) return s;
  return ToGrpc(core_->Leave(request->worker_id(), request->finished()));
}

grpc::Status ParameterServerService::GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest*,
                                               v1::GetStatusResponse* response) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  if (core_ == nullptr) return NotTheCoordinator();
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
  response->set_rounds(s.rounds);
  if (shards_ != nullptr) {
    for (const CoordinatorShards::ShardInfo& info : shards_->Shards()) {
      v1::ShardStatus* out = response->add_shards();
      out->set_index(static_cast<uint32_t>(info.index));
      out->set_address(info.address);
      out->set_connected(info.connected);
      out->set_slice_bytes(info.slice_bytes);
      out->set_steps_sent(info.steps_sent);
      out->set_queued_commands(static_cast<uint32_t>(info.queued));
    }
  }
  for (const WorkerSnapshot& w : s.workers) {
    v1::WorkerStatus* ws = response->add_workers();
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
  return grpc::Status::OK;
}

}  // namespace server
}  // namespace omnilearn
