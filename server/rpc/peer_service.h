// The server-to-server service (proto ServerPeers): a sharded job's shard servers register
// with the coordinator and read its commands (control/coordinator_shards.h). Not for
// workers: with the job's peer secret (--peer_token_file) only a call carrying it gets in,
// whatever workers' token it has; without a secret (every server on loopback) a call passes
// the workers' gate. Every server serves it; one that coordinates no sharded job (a shard
// server, a lone server) answers the callers that pass FAILED_PRECONDITION.
//
// Credentials first: the calls are served as streams of raw buffers (common/grpc_raw.h), so
// that a call without the secret is answered UNAUTHENTICATED (and counted) before its
// message is read off the stream, parsed, bounded or copied, and before the server's hold
// while it resumes or its role are looked at.
#ifndef OMNILEARN_SERVER_RPC_PEER_SERVICE_H_
#define OMNILEARN_SERVER_RPC_PEER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "common/grpc_raw.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/checkpoint/replica_store.h"
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
  PeerService(const SliceService* workers, DataPlane* data);

  // Before serving: the job's peer secret ("" for servers on loopback alone) and, on a
  // sharded job's coordinator, its `shards` (which outlive this; nullptr elsewhere).
  // `replicas`: where this server keeps the other slices' replicas it is sent (nullptr: it
  // keeps none, and says so). Each outlives this.
  void Enable(CoordinatorShards* shards, std::string peer_token, ReplicaStore* replicas = nullptr) {
    shards_ = shards;
    peer_token_ = std::move(peer_token);
    replicas_ = replicas;
  }

  // Shard (proto ServerPeers.Shard, and its alias ParameterServer.Shard of the previous
  // release): a shard's hello in, the coordinator's commands out, until either ends.
  grpc::Status ShardStream(grpc::ServerContext* ctx, raw::ServerStream* stream);
  // KeepReplica: a slice's checkpoint in pieces, kept in `replicas`; FetchReplica: one kept, out.
  grpc::Status KeepReplica(grpc::ServerContext* ctx, raw::ServerStream* stream);
  grpc::Status FetchReplica(grpc::ServerContext* ctx, raw::ServerStream* stream);

 private:
  // A unary call served as a stream: admitted (AdmitPeer), its one request read, `answer`
  // called, its response written.
  template <typename Request, typename Response>
  grpc::Status Unary(grpc::ServerContext* ctx, raw::ServerStream* stream,
                     grpc::Status (PeerService::*answer)(grpc::ServerContext*, const Request&, Response*));
  // A clipped job's norm: a shard's part in, the whole model's out (CoordinatorShards::ReduceNorm).
  grpc::Status StepNorm(grpc::ServerContext* ctx, const v1::ShardNorm& part, v1::ShardNormTotal* total);
  // A shard's checkpoints after one it was told to take (CoordinatorShards::ReportCheckpoints).
  grpc::Status ReportCheckpoints(grpc::ServerContext* ctx, const v1::ShardCheckpoints& report,
                                 v1::ShardCheckpointsAck* ack);

  grpc::Status AuthorizePeer(const grpc::ServerContext* ctx) const;
  // Every call's start, before its message is read: the peer's credentials (a refusal
  // logged), then that the server is not held, then (for the coordinator's calls) that it
  // coordinates a sharded job, or (for a replica's) that it keeps replicas. OK when the
  // call may go on.
  enum class Role { kCoordinator, kReplicas };
  grpc::Status AdmitPeer(const grpc::ServerContext* ctx, Role role = Role::kCoordinator);
  // Reads and parses the call's one request; INVALID_ARGUMENT when there is none or it is
  // not a `Request`.
  template <typename Request>
  static grpc::Status ReadRequest(raw::ServerStream* stream, Request* request);
  void LogRefused(const grpc::ServerContext* ctx, const grpc::Status& refused);

  const SliceService* const workers_;
  DataPlane* const data_;
  CoordinatorShards* shards_ = nullptr;
  ReplicaStore* replicas_ = nullptr;
  std::string peer_token_;
  RefusalLog refused_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_PEER_SERVICE_H_
