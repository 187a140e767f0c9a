// The gRPC edge of the server: proto <-> domain types and absl::Status <-> grpc::Status,
// in one place. Everything else lives in ParameterServerCore.
#ifndef OMNILEARN_SERVER_RPC_SERVICE_H_
#define OMNILEARN_SERVER_RPC_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_raw.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/control/coordinator_shards.h"
#include "server/control/parameter_server_core.h"
#include "server/data/shard_core.h"
#include "server/rpc/admission.h"
#include "server/rpc/peer_service.h"
#include "server/rpc/refusal_log.h"

namespace omnilearn {
namespace server {

grpc::Status ToGrpc(const absl::Status& status);

// The gRPC server settings the daemon runs with (message size limits, a busy port is an
// error rather than shared, at most `max_threads` calls served at once: beyond them a
// call gets RESOURCE_EXHAUSTED instead of a thread; keepalive pings accepted every 4 s,
// which a shard's link to its coordinator sends every 5 s: ShardLinkOptions::keepalive);
// the benchmarks use the same.
void ConfigureServerBuilder(grpc::ServerBuilder& builder, int max_threads = 1024);

// Thread-safe (the core is).
class ParameterServerService final : public v1::ParameterServer::Service {
 public:
  // `core` must outlive the service. `max_wait` bounds how long Join and Push block
  // when the client set no deadline. With an `auth_token`, every call must carry
  // "authorization: Bearer <token>" or gets UNAUTHENTICATED (and is counted).
  // `wire_dtype`: the values of gradients and models for sessions whose worker can use
  // it (JoinHeader.wire_dtypes); float32 is always accepted.
  explicit ParameterServerService(ParameterServerCore* core, absl::Duration max_wait = absl::Minutes(10),
                                  std::string auth_token = "", ServiceLimits limits = {},
                                  v1::WireDtype wire_dtype = v1::WIRE_DTYPE_F32);
  // A shard server's service: pushes and pulls of its slice; the control calls (Join,
  // Heartbeat, Leave, GetStatus) answer FAILED_PRECONDITION (workers join the coordinator).
  ParameterServerService(ShardCore* shard, absl::Duration max_wait, std::string auth_token, ServiceLimits limits,
                         v1::WireDtype wire_dtype);
  ~ParameterServerService() override;
  // A sharded job's coordinator: joins wait for the shards and are answered with the shard
  // map, and peers() registers shard servers. Before serving; `shards` outlives this.
  // With a `peer_token` (the job's peer secret) only a call that carries it may register a
  // shard, whatever workers' token it has; without one (a job whose servers all listen on
  // loopback) the Shard call passes the workers' gate as every call does.
  void EnableShards(CoordinatorShards* shards, std::string peer_token = "") {
    shards_ = shards;
    peers_.Enable(shards, std::move(peer_token));
  }
  // The server-to-server service of this server (proto ServerPeers): registered beside
  // this one on the same port.
  PeerService& peers() { return peers_; }
  // Until Open(), every call is answered UNAVAILABLE (retry): the server listens while it
  // resumes from its checkpoint, so a second server on the same port fails before it reads
  // anything. Open from the start unless Hold() was called before serving.
  void Hold() { open_.store(false); }
  void Open() { open_.store(true); }

  grpc::Status Join(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                    v1::JoinResponse* response) override;
  // Pull, Push and PushPull carry the model: they read and write grpc::ByteBuffers, so
  // chunks go from the snapshot to the transport and from the received slices into the
  // gradient without protobuf copies (common/grpc_chunks.h). The wire format is the
  // proto's; the constructor installs them in place of the generated handlers.
  using RawStream = raw::ServerStream;
  grpc::Status PullRaw(grpc::ServerContext* ctx, RawStream* stream);
  grpc::Status PushRaw(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                       v1::PushResponse* response);
  grpc::Status PushPullRaw(grpc::ServerContext* ctx, RawStream* stream);
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* request, v1::LeaveResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* ctx, const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;
  // Deprecated: ServerPeers.Shard (peers()) under its name of the previous release, for
  // shard servers of that release.
  grpc::Status Shard(grpc::ServerContext* ctx, const v1::ShardHello* hello,
                     grpc::ServerWriter<v1::ShardCommand>* writer) override;

  // Every call's gate: OK, or UNAUTHENTICATED (counted) when a token is required and the
  // call lacks it. Join, GetStatus, Pull and the pushes pass it before reading anything;
  // Pull and the pushes then check the session secret their first message carries.
  grpc::Status Authorize(const grpc::ServerContext* ctx) const;
  // UNAVAILABLE while the service is held (Hold, until Open); else OK.
  grpc::Status Held() const;

  // Whether worker `id`'s session holds its upload slot: a push of it is being read.
  bool PushInFlight(WorkerId id) const;
  // How many client streams are being read (watched for idleness) now.
  size_t WatchedStreams() const { return admission_.watched(); }

 private:
  ParameterServerService(DataPlane* data, ParameterServerCore* core, absl::Duration max_wait, std::string auth_token,
                         ServiceLimits limits, v1::WireDtype wire_dtype);
  static grpc::Status NotTheCoordinator() {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this is a shard server: workers join the job's coordinator, whose answer names the shards");
  }
  // A sharded join: waits for the shards, checks the model against the job's, and gives
  // the core slice 0 (layout and initial values; the whole model is kept for the shards).
  absl::StatusOr<ShardMap> JoinSliceZero(grpc::ServerContext* ctx, JoinInfo* info);
  // How long a call may wait: `max_wait`, or less when the client's deadline is sooner.
  absl::Duration WaitLeft(const grpc::ServerContext* ctx) const;
  // The same as a time on the core's clock.
  absl::Time Deadline(const grpc::ServerContext* ctx) const;
  // `*dtype`: the push's wire dtype (its PushPull reply's model goes the same way).
  // Join's work; Join logs what it refused (once per cause and peer a minute).
  // `*asked_for_model`: the core wants the worker's model (answered with
  // JoinResponse.send_model, or FAILED_PRECONDITION to a worker of an earlier release).
  grpc::Status JoinCall(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                        v1::JoinResponse* response, bool* asked_for_model);
  class StreamWatch;
  // The join's chunks after its header, into info->initial_parameters (when the header
  // announces them or any come), holding an upload slot while they are read.
  grpc::Status ReadInitialParameters(grpc::ServerContext* ctx, grpc::ServerReader<v1::JoinRequest>* reader,
                                     StreamWatch* watch, const v1::JoinHeader& header, JoinInfo* info);
  // The reply to a join the core answered: the session, or only the stop.
  void FillJoinResponse(const JoinResult& r, const v1::JoinHeader& header, v1::JoinResponse* response) const;
  template <typename Stream>
  absl::StatusOr<PushResult> ReadAndPush(grpc::ServerContext* ctx, Stream* stream, bool until_complete, PushInfo* info,
                                         v1::WireDtype* dtype);
  // A push's gradient (its chunks, and its trailer: info's time and loss); InvalidArgument
  // for a bad chunk or trailer, an incomplete gradient.
  template <typename Stream>
  absl::StatusOr<std::vector<float>> ReadGradient(Stream* stream, StreamWatch* watch, const v1::PushHeader& header,
                                                  bool until_complete, PushInfo* info);
  static void FillReply(const PushResult& r, v1::PushResponse* response);
  // Writes a snapshot as Pull does: a PullHeader inside `Envelope`, then (unless up to
  // date) the chunks as the envelope's field `chunk_field`, in `dtype`.
  template <typename Envelope, typename Writer>
  grpc::Status WriteModel(const ModelSnapshot& snap, int chunk_field, v1::WireDtype dtype, Writer* writer);
  // OK for float32 and this server's wire dtype; InvalidArgument for any other.
  absl::Status CheckWireDtype(v1::WireDtype dtype) const;
  // The bfloat16 values of `weights` (a snapshot's), made once per snapshot and shared by
  // every bfloat16 session that pulls it.
  std::shared_ptr<const std::vector<uint16_t>> Bfloat16Of(const std::shared_ptr<const std::vector<float>>& weights);
  // The gate of the unary calls made for a worker session (Heartbeat, Leave): Authorize,
  // then the request's worker id and session secret.
  template <typename Request>
  grpc::Status AuthorizeSession(const grpc::ServerContext* ctx, const Request& request) const;
  // Logs a refused registration once per cause and peer a minute (a refused shard retries).

  // Watches a client stream while it is read, from construction to Done() (or
  // destruction): the call is cancelled when Touch() was not called for the idle timeout.
  // Not while the core works on the call (a join at the start barrier, a push in a round).
  class StreamWatch {
   public:
    StreamWatch(Admission* admission, grpc::ServerContext* ctx);
    ~StreamWatch() { Done(); }
    void Touch() { admission_->Touch(id_); }
    void Done() { admission_->Unwatch(id_); }  // again: a no-op

   private:
    Admission* const admission_;
    const Admission::StreamId id_;
  };

  DataPlane* const data_;
  ParameterServerCore* const core_;  // null in a shard server
  CoordinatorShards* shards_ = nullptr;
  std::atomic<bool> open_{true};
  RefusalLog refused_joins_;
  PeerService peers_{this, data_};
  const absl::Duration max_wait_;
  const std::string auth_token_;
  const v1::WireDtype wire_dtype_;

  absl::Mutex bf16_mu_;
  std::shared_ptr<const std::vector<float>> bf16_source_ ABSL_GUARDED_BY(bf16_mu_);
  std::shared_ptr<const std::vector<uint16_t>> bf16_values_ ABSL_GUARDED_BY(bf16_mu_);

  Admission admission_;
  std::thread watchdog_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SERVICE_H_
