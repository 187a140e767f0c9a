// The gRPC edge of the server: proto <-> domain types and absl::Status <-> grpc::Status,
// in one place. Everything else lives in ParameterServerCore.
#ifndef OMNILEARN_SERVER_SERVICE_H_
#define OMNILEARN_SERVER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "proto/omnilearn.grpc.pb.h"
#include "server/parameter_server_core.h"

namespace omnilearn {
namespace server {

grpc::Status ToGrpc(const absl::Status& status);

// The gRPC server settings the daemon runs with (message size limits, a busy port is an
// error rather than shared); the benchmarks use the same.
void ConfigureServerBuilder(grpc::ServerBuilder& builder);

// Thread-safe (the core is).
class ParameterServerService final : public v1::ParameterServer::Service {
 public:
  // `core` must outlive the service. `max_wait` bounds how long Join and Push block
  // when the client set no deadline. With an `auth_token`, every call must carry
  // "authorization: Bearer <token>" or gets UNAUTHENTICATED (and is counted).
  explicit ParameterServerService(ParameterServerCore* core, absl::Duration max_wait = absl::Minutes(10),
                                  std::string auth_token = "")
      : core_(core), max_wait_(max_wait), auth_token_(std::move(auth_token)) {}

  grpc::Status Join(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                    v1::JoinResponse* response) override;
  grpc::Status Pull(grpc::ServerContext* ctx, const v1::PullRequest* request,
                    grpc::ServerWriter<v1::PullResponse>* writer) override;
  grpc::Status Push(grpc::ServerContext* ctx, grpc::ServerReader<v1::PushRequest>* reader,
                    v1::PushResponse* response) override;
  grpc::Status PushPull(grpc::ServerContext* ctx,
                        grpc::ServerReaderWriter<v1::PushPullResponse, v1::PushRequest>* stream) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* request, v1::LeaveResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;

 private:
  absl::Time Deadline(const grpc::ServerContext* ctx) const;
  template <typename Stream>
  absl::StatusOr<PushResult> ReadAndPush(grpc::ServerContext* ctx, Stream* stream, bool until_complete,
                                         PushInfo* info);
  static void FillReply(const PushResult& r, v1::PushResponse* response);
  template <typename Emit>
  grpc::Status WriteModel(const ModelSnapshot& snap, Emit emit);
  // OK, or UNAUTHENTICATED when a token is required and the call lacks it.
  grpc::Status Authorize(const grpc::ServerContext* ctx) const;

  ParameterServerCore* core_;
  const absl::Duration max_wait_;
  const std::string auth_token_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_SERVICE_H_
