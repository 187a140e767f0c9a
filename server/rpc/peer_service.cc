#include "server/rpc/peer_service.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "server/rpc/slice_service.h"

namespace omnilearn {
namespace server {

grpc::Status PeerService::AuthorizePeer(const grpc::ServerContext* ctx) const {
  if (peer_token_.empty()) return workers_->Authorize(ctx);
  if (grpc::Status held = workers_->Held(); !held.ok()) return held;
  if (PeerTokenMatches(ctx->client_metadata(), peer_token_)) return grpc::Status::OK;
  data_->CountUnauthenticated();
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "the Shard call is for the job's servers: it must carry the job's peer secret "
                      "(--peer_token_file); the workers' token does not make a caller a server");
}

void PeerService::LogRefused(const grpc::ServerContext* ctx, const grpc::Status& refused) {
  if (std::optional<std::string> line =
          refused_.Line("a shard's registration", ctx->peer(), static_cast<absl::StatusCode>(refused.error_code()),
                        refused.error_message(), data_->clock().Now())) {
    data_->Log(*line);
  }
}

grpc::Status PeerService::Shard(grpc::ServerContext* ctx, const v1::ShardHello* hello,
                                grpc::ServerWriter<v1::ShardCommand>* writer) {
  if (shards_ == nullptr) {
    if (grpc::Status auth = workers_->Authorize(ctx); !auth.ok()) return auth;
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this server runs no sharded job: start the coordinator with --shards");
  }
  if (grpc::Status auth = AuthorizePeer(ctx); !auth.ok()) {
    LogRefused(ctx, auth);
    return auth;
  }
  uint64_t generation = 0;
  absl::StatusOr<int> index = shards_->Register(*hello, &generation);
  if (!index.ok()) {
    LogRefused(ctx, ToGrpc(index.status()));
    return ToGrpc(index.status());
  }
  CoordinatorShards::Outgoing out;
  absl::Status next;
  while (!ctx->IsCancelled() && (next = shards_->Next(*index, generation, &out, absl::Now() + absl::Seconds(1))).ok()) {
    if (out.command.kind_case() == v1::ShardCommand::KIND_NOT_SET) continue;  // nothing for a second
    if (!writer->Write(out.command)) break;
    if (out.values == nullptr) continue;
    // The slice's first values, in the slice layout's chunks.
    const ModelLayout slice = shards_->SliceLayout(*index);
    const bool sent = ForEachChunk(slice, out.values->data(), kMaxChunkBytes, [&](v1::TensorChunk& chunk) {
      v1::ShardCommand c;
      *c.mutable_chunk() = std::move(chunk);
      return writer->Write(c);
    });
    if (!sent) break;
  }
  if (absl::IsAborted(next)) return ToGrpc(next);  // it registers again (a recovery)
  shards_->Disconnect(*index);
  return grpc::Status::OK;
}

}  // namespace server
}  // namespace omnilearn
