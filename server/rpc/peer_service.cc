#include "server/rpc/peer_service.h"

#include <algorithm>
#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "server/rpc/replica_calls.h"
#include "server/rpc/shard_wire.h"
#include "server/rpc/slice_service.h"

namespace omnilearn {
namespace server {
namespace {

// Writes `message` as one raw buffer of the stream.
template <typename Message>
bool WriteMessage(raw::ServerStream* stream, const Message& message) {
  raw::Buffer buffer;
  bool own = false;
  return grpc::SerializationTraits<Message>::Serialize(message, &buffer, &own).ok() && stream->Write(buffer);
}

}  // namespace

PeerService::PeerService(const SliceService* workers, DataPlane* data) : workers_(workers), data_(data) {
  // Every method by its index in the service (the generated code adds them in the proto's
  // order), as a stream of raw buffers: a unary call read and answered as a bidirectional
  // stream of one message each way, a server-streaming one reading its request itself.
  const google::protobuf::ServiceDescriptor* d = v1::ShardHello::descriptor()->file()->FindServiceByName("ServerPeers");
  using Self = PeerService;
  MarkMethodStreamed(d->FindMethodByName("Shard")->index(),
                     raw::BidiHandler(this, [](Self* s, grpc::ServerContext* ctx, raw::ServerStream* stream) {
                       return s->ShardStream(ctx, stream);
                     }));
  MarkMethodStreamed(d->FindMethodByName("StepNorm")->index(),
                     raw::BidiHandler(this, [](Self* s, grpc::ServerContext* ctx, raw::ServerStream* stream) {
                       return s->Unary(ctx, stream, &Self::StepNorm);
                     }));
  MarkMethodStreamed(d->FindMethodByName("ReportCheckpoints")->index(),
                     raw::BidiHandler(this, [](Self* s, grpc::ServerContext* ctx, raw::ServerStream* stream) {
                       return s->Unary(ctx, stream, &Self::ReportCheckpoints);
                     }));
  // Client- and server-streaming: the wire is a stream each way, as a bidirectional call's.
  MarkMethodStreamed(d->FindMethodByName("KeepReplica")->index(),
                     raw::BidiHandler(this, [](Self* s, grpc::ServerContext* ctx, raw::ServerStream* stream) {
                       return s->KeepReplica(ctx, stream);
                     }));
  MarkMethodStreamed(d->FindMethodByName("FetchReplica")->index(),
                     raw::BidiHandler(this, [](Self* s, grpc::ServerContext* ctx, raw::ServerStream* stream) {
                       return s->FetchReplica(ctx, stream);
                     }));
}

grpc::Status PeerService::AuthorizePeer(const grpc::ServerContext* ctx) const {
  if (peer_token_.empty()) return workers_->Authorize(ctx);
  // The secret before anything else, the server's hold while it resumes included.
  if (!PeerTokenMatches(ctx->client_metadata(), peer_token_)) {
    data_->CountUnauthenticated();
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the server-to-server calls are for the job's servers: it must carry the job's peer secret "
                        "(--peer_token_file); the workers' token does not make a caller a server");
  }
  return workers_->Held();
}

grpc::Status PeerService::AdmitPeer(const grpc::ServerContext* ctx, Role role) {
  if (grpc::Status auth = AuthorizePeer(ctx); !auth.ok()) {  // before any field or role
    LogRefused(ctx, auth);
    return auth;
  }
  if (role == Role::kReplicas) {
    if (replicas_ != nullptr) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this server keeps no replicas of other slices: it serves no sharded job");
  }
  if (shards_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this server coordinates no sharded job: shards register with the job's coordinator, started "
                        "with --shards");
  }
  return grpc::Status::OK;
}

template <typename Request>
grpc::Status PeerService::ReadRequest(raw::ServerStream* stream, Request* request) {
  raw::Buffer buffer;
  if (!stream->Read(&buffer)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the call ended before its request");
  }
  if (!grpc::SerializationTraits<Request>::Deserialize(&buffer, request).ok()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("the request is not a ", Request::descriptor()->full_name()));
  }
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::Status PeerService::Unary(grpc::ServerContext* ctx, raw::ServerStream* stream,
                                grpc::Status (PeerService::*answer)(grpc::ServerContext*, const Request&, Response*)) {
  if (grpc::Status admitted = AdmitPeer(ctx); !admitted.ok()) return admitted;
  Request request;
  if (grpc::Status read = ReadRequest(stream, &request); !read.ok()) return read;
  Response response;
  if (grpc::Status s = (this->*answer)(ctx, request, &response); !s.ok()) return s;
  return WriteMessage(stream, response) ? grpc::Status::OK
                                        : grpc::Status(grpc::StatusCode::CANCELLED, "the shard left");
}

void PeerService::LogRefused(const grpc::ServerContext* ctx, const grpc::Status& refused) {
  if (std::optional<std::string> line =
          refused_.Line("a shard's registration", ctx->peer(), static_cast<absl::StatusCode>(refused.error_code()),
                        refused.error_message(), data_->clock().Now())) {
    data_->Log(*line);
  }
}

grpc::Status PeerService::ShardStream(grpc::ServerContext* ctx, raw::ServerStream* stream) {
  if (grpc::Status admitted = AdmitPeer(ctx); !admitted.ok()) return admitted;
  v1::ShardHello hello;
  if (grpc::Status read = ReadRequest(stream, &hello); !read.ok()) return read;
  uint64_t generation = 0;
  absl::StatusOr<int> index = shards_->Register(RegistrationFromProto(hello), &generation);
  if (!index.ok()) {
    LogRefused(ctx, ToGrpc(index.status()));
    return ToGrpc(index.status());
  }
  CoordinatorShards::Outgoing out;
  absl::Status next;
  while (!ctx->IsCancelled() && (next = shards_->Next(*index, generation, &out, absl::Now() + absl::Seconds(1))).ok()) {
    if (std::holds_alternative<std::monostate>(out.command)) continue;  // nothing for a second
    if (!WriteMessage(stream, CommandToProto(out.command))) break;
    if (out.values == nullptr) continue;
    // The slice's first values, in the slice layout's chunks.
    const ModelLayout slice = shards_->SliceLayout(*index);
    const bool sent = ForEachChunk(slice, out.values->data(), kMaxChunkBytes, [&](v1::TensorChunk& chunk) {
      v1::ShardCommand c;
      *c.mutable_chunk() = std::move(chunk);
      return WriteMessage(stream, c);
    });
    if (!sent) break;
  }
  if (absl::IsAborted(next)) return ToGrpc(next);  // it registers again (a recovery)
  shards_->Disconnect(*index);
  return grpc::Status::OK;
}

grpc::Status PeerService::KeepReplica(grpc::ServerContext* ctx, raw::ServerStream* stream) {
  if (grpc::Status admitted = AdmitPeer(ctx, Role::kReplicas); !admitted.ok()) return admitted;
  ReplicaPieces pieces;
  v1::ReplicaPiece piece;
  do {
    if (grpc::Status read = ReadRequest(stream, &piece); !read.ok()) return read;
    if (absl::Status added = pieces.Add(piece); !added.ok()) return ToGrpc(added);
  } while (!pieces.complete());
  const v1::ReplicaPiece& first = pieces.first();
  if (absl::Status kept =
          replicas_->Keep(static_cast<int>(first.index()), first.version(), first.fingerprint(), pieces.Take());
      !kept.ok()) {
    return ToGrpc(kept);
  }
  return WriteMessage(stream, v1::ReplicaKept()) ? grpc::Status::OK
                                                 : grpc::Status(grpc::StatusCode::CANCELLED, "the sender left");
}

grpc::Status PeerService::FetchReplica(grpc::ServerContext* ctx, raw::ServerStream* stream) {
  if (grpc::Status admitted = AdmitPeer(ctx, Role::kReplicas); !admitted.ok()) return admitted;
  v1::ReplicaRequest request;
  if (grpc::Status read = ReadRequest(stream, &request); !read.ok()) return read;
  const int index = static_cast<int>(std::min<uint64_t>(request.index(), kMaxSliceIndex));
  absl::StatusOr<std::shared_ptr<const std::string>> kept =
      replicas_->Get(index, request.version(), request.fingerprint());
  if (!kept.ok()) return ToGrpc(kept.status());
  const bool sent = WriteReplicaPieces(index, request.version(), request.fingerprint(), **kept,
                                       [stream](const v1::ReplicaPiece& p) { return WriteMessage(stream, p); });
  return sent ? grpc::Status::OK : grpc::Status(grpc::StatusCode::CANCELLED, "the caller left");
}

grpc::Status PeerService::StepNorm(grpc::ServerContext* ctx, const v1::ShardNorm& part, v1::ShardNormTotal* total) {
  const std::optional<ShardMap> map = shards_->map();
  if (part.index() == 0 || !map.has_value() || map->fingerprint() != part.fingerprint()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrFormat("a norm of slice %u of map %016x: not a shard's slice of this job's map",
                                        part.index(), part.fingerprint()));
  }
  const absl::Time deadline = std::min(absl::FromChrono(ctx->deadline()), absl::Now() + absl::Minutes(10));
  const int index = static_cast<int>(std::min<uint32_t>(part.index(), 1u << 20));  // ReduceNorm checks the range
  absl::StatusOr<double> sum = shards_->ReduceNorm(part.version(), index, part.sum_squares(), deadline);
  if (!sum.ok()) return ToGrpc(sum.status());
  total->set_sum_squares(*sum);
  return grpc::Status::OK;
}

grpc::Status PeerService::ReportCheckpoints(grpc::ServerContext*, const v1::ShardCheckpoints& report,
                                            v1::ShardCheckpointsAck*) {
  absl::StatusOr<CheckpointHealthView> view = CheckpointsFromProto(report.checkpoints());
  if (!view.ok()) return ToGrpc(view.status());
  const int index = static_cast<int>(std::min<uint32_t>(report.index(), 1u << 20));  // checked against the slots
  return ToGrpc(shards_->ReportCheckpoints(index, report.fingerprint(), *view));
}

}  // namespace server
}  // namespace omnilearn
