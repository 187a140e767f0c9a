// The server-to-server service (proto ServerPeers): a sharded job's shard servers register
// with the coordinator and read its commands (control/coordinator_shards.h). Not for
// workers: with the job's peer secret (--peer_token_file) only a call carrying it gets in,
// whatever workers' token it has; without one (every server on loopback) a call passes the
// workers' gate. A server that runs no sharded job answers FAILED_PRECONDITION.
#ifndef OMNILEARN_SERVER_RPC_PEER_SERVICE_H_
#define OMNILEARN_SERVER_RPC_PEER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "proto/omnilearn.grpc.pb.h"
#include "server/control/coordinator_shards.h"
#include "server/control/data_plane.h"
#include "server/rpc/refusal_log.h"

namespace omnilearn {
namespace server {

class SliceService;

class PeerService final : public v1::ServerPeers::Service {
 public:
  // `workers`: the worker-facing service, whose gate (held while resuming, the workers'
  // token) a call passes without a peer secret; `data` counts and logs what this service
  // refuses. Both outlive it.
  PeerService(const SliceService* workers, DataPlane* data) : workers_(workers), data_(data) {}

  // A sharded job's coordinator: before serving; `shards` outlives this.
  void Enable(CoordinatorShards* shards, std::string peer_token) {
    shards_ = shards;
    peer_token_ = std::move(peer_token);
  }

  grpc::Status Shard(grpc::ServerContext* ctx, const v1::ShardHello* hello,
                     grpc::ServerWriter<v1::ShardCommand>* writer) override;
  // A clipped job's norm: a shard's part in, the whole model's out (CoordinatorShards::ReduceNorm).
  grpc::Status StepNorm(grpc::ServerContext* ctx, const v1::ShardNorm* part, v1::ShardNormTotal* total) override;
  // A shard's checkpoints after one it was told to take (CoordinatorShards::ReportCheckpoints).
  grpc::Status ReportCheckpoints(grpc::ServerContext* ctx, const v1::ShardCheckpoints* report,
                                 v1::ShardCheckpointsAck* ack) override;

 private:
  grpc::Status AuthorizePeer(const grpc::ServerContext* ctx) const;
  // Every call's start: the peer's credentials (a refusal logged), then that this server
  // runs a sharded job. OK when the call may go on.
  grpc::Status AdmitPeer(const grpc::ServerContext* ctx);
  void LogRefused(const grpc::ServerContext* ctx, const grpc::Status& refused);

  const SliceService* const workers_;
  DataPlane* const data_;
  CoordinatorShards* shards_ = nullptr;
  std::string peer_token_;
  RefusalLog refused_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_PEER_SERVICE_H_
