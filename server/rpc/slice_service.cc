#include "server/rpc/slice_service.h"

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_chunks.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"

namespace omnilearn {
namespace server {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

v1::Action ActionToProto(Action a) {
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

void SamplesToProto(const SampleBatch& batch, google::protobuf::RepeatedPtrField<v1::SampleSpan>* out) {
  for (const SampleSpan& span : batch) {
    v1::SampleSpan* s = out->Add();
    s->set_epoch(span.epoch);
    s->mutable_ids()->Add(span.ids.begin(), span.ids.end());
  }
}

SliceService::SliceService(DataPlane* data, absl::Duration max_wait, std::string auth_token, ServiceLimits limits,
                           v1::WireDtype wire_dtype)
    : data_(data),
      wire_dtype_(wire_dtype),
      admission_(&data->clock(), limits),
      max_wait_(max_wait),
      auth_token_(std::move(auth_token)) {
  // The model-carrying methods, by their index in the service (the generated code adds
  // them in the proto's order), as streams of raw buffers; and the previous release's Shard,
  // read only once the caller's credentials passed (PeerService). A server-streaming Pull served
  // as a bidirectional stream reads its one request itself; the wire is the same.
  const google::protobuf::ServiceDescriptor* d =
      v1::PullRequest::descriptor()->file()->FindServiceByName("ParameterServer");
  using Self = SliceService;
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
  MarkMethodStreamed(d->FindMethodByName("Shard")->index(),
                     raw::BidiHandler(this, [](Self* s, grpc::ServerContext* ctx, RawStream* stream) {
                       return s->peers_.ShardStream(ctx, stream);
                     }));
  watchdog_ = std::thread([this] { admission_.CancelIdleStreamsUntilStopped(); });
}

SliceService::~SliceService() {
  admission_.Stop();
  watchdog_.join();
}

SliceService::StreamWatch::StreamWatch(Admission* admission, grpc::ServerContext* ctx)
    : admission_(admission), id_(admission->Watch([ctx] { ctx->TryCancel(); })) {}

bool SliceService::PushInFlight(WorkerId id) const { return admission_.UploadInFlight(id); }

absl::Duration SliceService::WaitLeft(const grpc::ServerContext* ctx) const {
  return std::min(max_wait_, absl::FromChrono(ctx->deadline()) - absl::Now());
}

absl::Time SliceService::Deadline(const grpc::ServerContext* ctx) const {
  // The client's deadline is in real time; the core waits in its own clock's time.
  return data_->clock().Now() + WaitLeft(ctx);
}

grpc::Status SliceService::Held() const {
  if (open_.load()) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is resuming from its checkpoint: retry");
}

grpc::Status SliceService::Authorize(const grpc::ServerContext* ctx) const {
  if (auth_token_.empty()) return Held();
  const auto& md = ctx->client_metadata();
  auto it = md.find(kAuthorizationKey);
  if (it != md.end() && BearerTokenMatches(absl::string_view(it->second.data(), it->second.size()), auth_token_)) {
    return Held();  // the credentials first: a caller without them learns nothing, not even the hold
  }
  data_->CountUnauthenticated();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      it == md.end() ? "no bearer token: pass --auth_token_file" : "wrong bearer token");
}

absl::Status SliceService::CheckWireDtype(v1::WireDtype dtype) const {
  if (dtype == v1::WIRE_DTYPE_F32 || dtype == wire_dtype_) return absl::OkStatus();
  const std::string name = v1::WireDtype_Name(dtype);
  return absl::InvalidArgumentError(absl::StrCat("wire dtype ", name.empty() ? absl::StrCat(dtype) : name,
                                                 ": this server takes float32",
                                                 wire_dtype_ == v1::WIRE_DTYPE_F32 ? "" : " and its --wire_dtype",
                                                 " (its Join response says which the session uses)"));
}

std::shared_ptr<const std::vector<uint16_t>> SliceService::Bfloat16Of(
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
grpc::Status SliceService::WriteModel(const ModelSnapshot& snap, int chunk_field, v1::WireDtype dtype, Writer* writer) {
  Envelope first;
  v1::PullHeader* header = first.mutable_header();
  header->set_model_version(snap.version);
  header->set_history(snap.history);
  *header->mutable_layout() = LayoutToProto(snap.layout);
  header->set_up_to_date(snap.weights == nullptr);
  header->set_wire_dtype(dtype);
  if (!writer->Write(Serialize(first))) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  if (snap.weights == nullptr) return grpc::Status::OK;
  // The chunks' slices hold the snapshot (immutable), or its bfloat16 copy, until the
  // transport is done with them.
  auto write = [&](const grpc::ByteBuffer& b) { return writer->Write(b); };
  const std::vector<int> order = snap.layout.SendOrder();  // small buffers first: a forward needs them early
  bool sent;
  if (dtype == v1::WIRE_DTYPE_BF16) {
    std::shared_ptr<const std::vector<uint16_t>> values = Bfloat16Of(snap.weights);
    sent = ForEachChunkBufferInOrder(chunk_field, snap.layout, order, values->data(), values, write, sizeof(uint16_t));
  } else {
    sent = ForEachChunkBufferInOrder(chunk_field, snap.layout, order, snap.weights->data(), snap.weights, write);
  }
  if (!sent) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  data_->CountPullBytes(snap.layout.total_elements() * WireValueBytes(dtype));
  return grpc::Status::OK;
}

grpc::Status SliceService::PullRaw(grpc::ServerContext* ctx, RawStream* stream) {
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
absl::StatusOr<std::vector<float>> SliceService::ReadGradient(Stream* stream, StreamWatch* watch,
                                                              const v1::PushHeader& header, bool until_complete,
                                                              PushInfo* info) {
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
      info->accuracy_is_validation = msg.message().trailer().accuracy_is_validation();
      if (msg.message().trailer().has_emulation_overruns()) {
        info->emulation_overruns = msg.message().trailer().emulation_overruns();
      }
      const auto& rates = msg.message().trailer().group_lr();
      if (!rates.empty()) info->group_lr.assign(rates.begin(), rates.end());
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
absl::StatusOr<PushResult> SliceService::ReadAndPush(grpc::ServerContext* ctx, Stream* stream, bool until_complete,
                                                     PushInfo* info, v1::WireDtype* dtype) {
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
  if (absl::Status s = Serving(); !s.ok()) return s;
  // One push in flight per session, and one resend beside it: the gradients held are at most
  // one model per worker, two while a worker sends again what a lost connection held.
  const bool resend = header.resend();
  if (!admission_.BeginUpload(header.worker_id(), resend)) {
    data_->CountRejectedPush(header.worker_id(), "busy");
    return absl::ResourceExhaustedError(absl::StrCat("worker ", header.worker_id(), " has a ",
                                                     resend ? "resend" : "push", " in flight already: one at a time"));
  }
  absl::Cleanup end_upload = [this, resend, id = header.worker_id()] { admission_.EndUpload(id, resend); };
  info->id = header.worker_id();
  info->batch = header.batch_size();
  info->compute_seconds = header.compute_seconds();
  info->version = header.model_version();
  info->train_loss = header.train_loss();
  if (header.has_test_accuracy()) info->test_accuracy = header.test_accuracy();
  info->accuracy_is_validation = header.accuracy_is_validation();
  info->out_of_memory = header.out_of_memory();
  info->communication_seconds = header.communication_seconds();
  info->shard_held_seconds = header.shard_held_seconds();
  info->report_only = header.report_only();
  info->idle = header.idle();
  info->resend = resend;
  info->emulation_overruns = header.emulation_overruns();
  info->group_lr.assign(header.group_lr().begin(), header.group_lr().end());
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
  return data_->Push(*info, std::move(gradient), Deadline(ctx));
}

void SliceService::FillReply(const PushResult& r, v1::PushResponse* response) {
  response->set_action(ActionToProto(r.action));
  response->set_next_batch_size(r.next_batch);
  response->set_model_version(r.version);
  response->set_applied(r.applied);
  response->set_message(r.message);
  response->set_global_samples(r.global_samples);
  SamplesToProto(r.samples, response->mutable_samples());
  response->set_idle(r.idle);
  response->set_held_seconds(r.held_seconds);
}

grpc::Status SliceService::PushRaw(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                                   v1::PushResponse* response) {
  if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
  PushInfo info;
  v1::WireDtype dtype = v1::WIRE_DTYPE_F32;
  absl::StatusOr<PushResult> r = ReadAndPush(ctx, reader, /*until_complete=*/false, &info, &dtype);
  if (!r.ok()) return ToGrpc(r.status());
  FillReply(*r, response);
  return grpc::Status::OK;
}

grpc::Status SliceService::PushPullRaw(grpc::ServerContext* ctx, RawStream* stream) {
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

}  // namespace server
}  // namespace omnilearn
