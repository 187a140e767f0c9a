// The worker-facing service of a shard server: the slice calls (SliceService) on the
// shard's slice. Workers join, beat and leave at the job's coordinator: those calls are
// refused here with a line that says so.
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

  // FAILED_PRECONDITION: workers join the job's coordinator.
  grpc::Status Join(grpc::ServerContext*, grpc::ServerReader<v1::JoinRequest>*, v1::JoinResponse*) override {
    return NotTheCoordinator();
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*, v1::HeartbeatResponse*) override {
    return NotTheCoordinator();
  }
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*, v1::LeaveResponse*) override {
    return NotTheCoordinator();
  }
  grpc::Status GetStatus(grpc::ServerContext*, const v1::GetStatusRequest*, v1::GetStatusResponse*) override {
    return NotTheCoordinator();
  }

 private:
  static grpc::Status NotTheCoordinator() {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this is a shard server: workers join the job's coordinator, whose answer names the shards");
  }
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SHARD_SERVER_SERVICE_H_
