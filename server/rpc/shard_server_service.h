// The worker-facing service of a shard server: the slice calls (SliceService) on the
// shard's slice. Workers join, beat and leave at the job's coordinator: those calls are
// refused here with a line that says so, to callers that pass the workers' gate (others
// are told UNAUTHENTICATED, as on every call: credentials before any role).
#ifndef OMNILEARN_SERVER_RPC_SHARD_SERVER_SERVICE_H_
#define OMNILEARN_SERVER_RPC_SHARD_SERVER_SERVICE_H_

#include <string>

#include "server/data/shard_core.h"
#include "server/rpc/slice_service.h"

namespace omnilearn {
namespace server {

// Thread-safe (the shard is).
class ShardServerService final : public SliceService {
 public:
  // `shard` must outlive the service; the rest as SliceService's.
  ShardServerService(ShardCore* shard, absl::Duration max_wait, std::string auth_token, ServiceLimits limits,
                     v1::WireDtype wire_dtype)
      : SliceService(shard, max_wait, std::move(auth_token), limits, wire_dtype) {}

  // After the gate (Authorize), FAILED_PRECONDITION: workers join the job's coordinator.
  grpc::Status Join(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>*, v1::JoinResponse*) override {
    return NotTheCoordinator(ctx);
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override {
    return NotTheCoordinator(ctx);
  }
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest*, v1::LeaveResponse*) override {
    return NotTheCoordinator(ctx);
  }
  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest*, v1::GetStatusResponse*) override {
    return NotTheCoordinator(ctx);
  }

 private:
  grpc::Status NotTheCoordinator(const grpc::ServerContext* ctx) const {
    if (grpc::Status auth = Authorize(ctx); !auth.ok()) return auth;
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this is a shard server: workers join the job's coordinator, whose answer names the shards");
  }
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SHARD_SERVER_SERVICE_H_
