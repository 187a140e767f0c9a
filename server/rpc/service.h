// The gRPC edge of a lone server or a sharded job's coordinator: proto <-> domain types
// and absl::Status <-> grpc::Status. Everything else lives in ParameterServerCore.
#ifndef OMNILEARN_SERVER_RPC_SERVICE_H_
#define OMNILEARN_SERVER_RPC_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/checkpoint/checkpoint_health.h"
#include "server/control/coordinator_shards.h"
#include "server/control/parameter_server_core.h"
#include "server/rpc/admission.h"
#include "server/rpc/peer_service.h"
#include "server/rpc/refusal_log.h"
#include "server/rpc/slice_service.h"

namespace omnilearn {
namespace server {

// The gRPC server settings the daemon runs with (message size limits, a busy port is an
// error rather than shared, at most `max_threads` calls served at once: beyond them a
// call gets RESOURCE_EXHAUSTED instead of a thread; keepalive pings accepted every 4 s,
// which a shard's link to its coordinator sends every 5 s: ShardLinkOptions::keepalive);
// the benchmarks use the same.
void ConfigureServerBuilder(grpc::ServerBuilder& builder, int max_threads = 1024);

// The worker-facing service of a lone server or a sharded job's coordinator: the slice
// calls (SliceService) on the core's data plane, and the control calls (Join, Heartbeat,
// Leave, GetStatus). Thread-safe (the core is).
class ParameterServerService final : public SliceService {
 public:
  // `core` must outlive the service; the rest as SliceService's.
  explicit ParameterServerService(ParameterServerCore* core, absl::Duration max_wait = absl::Minutes(10),
                                  std::string auth_token = "", ServiceLimits limits = {},
                                  v1::WireDtype wire_dtype = v1::WIRE_DTYPE_F32);
  // A sharded job's coordinator: joins wait for the shards and are answered with the shard
  // map, and peers() registers shard servers. Before serving; `shards` outlives this.
  // With a `peer_token` (the job's peer secret) only a call that carries it may register a
  // shard, whatever workers' token it has; without one (a job whose servers all listen on
  // loopback) the Shard call passes the workers' gate as every call does.
  void EnableShards(CoordinatorShards* shards, std::string peer_token = "", ReplicaStore* replicas = nullptr) {
    shards_ = shards;
    peers_.Enable(shards, std::move(peer_token), replicas);
  }
  // The server's checkpoints, for GetStatus (unset: it keeps none). Before serving;
  // `health` outlives this.
  void ShowCheckpoints(const CheckpointHealth* health) { checkpoints_ = health; }

  grpc::Status Join(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                    v1::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* request, v1::LeaveResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;

 private:
  absl::Status Serving() const override;
  // A sharded join: waits for the shards, checks the model against the job's, and gives
  // the core slice 0 (layout and initial values; the whole model is kept for the shards).
  absl::StatusOr<ShardMap> JoinSliceZero(grpc::ServerContext* ctx, JoinInfo* info);
  // Join's work; Join logs what it refused (once per cause and peer a minute).
  // `*asked_for_model`: the core wants the worker's model (answered with
  // JoinResponse.send_model, or FAILED_PRECONDITION to a worker of an earlier release).
  grpc::Status JoinCall(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                        v1::JoinResponse* response, bool* asked_for_model);
  // The join's chunks after its header, into info->initial_parameters (when the header
  // announces them or any come), holding an upload slot while they are read.
  grpc::Status ReadInitialParameters(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                                     StreamWatch* watch, const v1::JoinHeader& header, JoinInfo* info);
  // The reply to a join the core answered: the session, or only the stop.
  void FillJoinResponse(const JoinResult& r, const v1::JoinHeader& header, v1::JoinResponse* response) const;
  // The gate of the unary calls made for a worker session (Heartbeat, Leave): Authorize,
  // then the request's worker id and session secret.
  template <typename Request>
  grpc::Status AuthorizeSession(const grpc::ServerContext* ctx, const Request& request) const;

  ParameterServerCore* const core_;
  CoordinatorShards* shards_ = nullptr;
  const CheckpointHealth* checkpoints_ = nullptr;
  RefusalLog refused_joins_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SERVICE_H_
