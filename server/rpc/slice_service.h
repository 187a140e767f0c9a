// The worker-facing calls that carry a slice of the model (Pull, Push, PushPull), on any
// data plane: the part both services share. The coordinator's (or a lone server's)
// ParameterServerService (service.h) adds the control calls; a shard server's
// ShardServerService (shard_server_service.h) refuses them. Also every call's gate: the
// workers' bearer token, then held while resuming; the admission of streams and uploads; and
// the server-to-server service (peers()).
#ifndef OMNILEARN_SERVER_RPC_SLICE_SERVICE_H_
#define OMNILEARN_SERVER_RPC_SLICE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/grpc_raw.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/control/data_plane.h"
#include "server/rpc/admission.h"
#include "server/rpc/peer_service.h"

namespace omnilearn {
namespace server {

grpc::Status ToGrpc(const absl::Status& status);
v1::Action ActionToProto(Action a);
void SamplesToProto(const SampleBatch& batch, google::protobuf::RepeatedPtrField<v1::SampleSpan>* out);

// Thread-safe (the data plane is).
class SliceService : public v1::ParameterServer::Service {
 public:
  // `data` must outlive the service. `max_wait` bounds how long a call blocks when the
  // client set no deadline. With an `auth_token`, every call must carry
  // "authorization: Bearer <token>" or gets UNAUTHENTICATED (and is counted).
  // `wire_dtype`: the values of gradients and models for sessions whose worker can use
  // it; float32 is always accepted.
  SliceService(DataPlane* data, absl::Duration max_wait, std::string auth_token, ServiceLimits limits,
               v1::WireDtype wire_dtype);
  ~SliceService() override;

  // Until Open(), every call is answered UNAVAILABLE (retry): the server listens while it
  // resumes from its checkpoint, so a second server on the same port fails before it reads
  // anything. Open from the start unless Hold() was called before serving.
  void Hold() { open_.store(false); }
  void Open() { open_.store(true); }

  // Pull, Push and PushPull carry the model: they read and write grpc::ByteBuffers, so
  // chunks go from the snapshot to the transport and from the received slices into the
  // gradient without protobuf copies (common/grpc_chunks.h). The wire format is the
  // proto's; the constructor installs them in place of the generated handlers.
  using RawStream = raw::ServerStream;
  grpc::Status PullRaw(grpc::ServerContext* ctx, RawStream* stream);
  grpc::Status PushRaw(grpc::ServerContext* ctx, grpc::ServerReader<grpc::ByteBuffer>* reader,
                       v1::PushResponse* response);
  grpc::Status PushPullRaw(grpc::ServerContext* ctx, RawStream* stream);

  // Every call's gate: UNAUTHENTICATED (counted) when a token is required and the call
  // lacks it; else UNAVAILABLE while held (Held); else OK. Join, GetStatus, Pull and the
  // pushes pass it before reading anything;
  // Pull and the pushes then check the session secret their first message carries.
  grpc::Status Authorize(const grpc::ServerContext* ctx) const;
  // UNAVAILABLE while the service is held (Hold, until Open); else OK.
  grpc::Status Held() const;

  // The server-to-server service of this server (proto ServerPeers), registered beside this
  // one on the same port; this service's ParameterServer.Shard, the previous release's name
  // of ServerPeers.Shard, is served by it too.
  PeerService& peers() { return peers_; }

  // Whether worker `id`'s session holds its upload slot: a push of it is being read.
  bool PushInFlight(WorkerId id) const;
  // How many client streams are being read (watched for idleness) now.
  size_t WatchedStreams() const { return admission_.watched(); }

 protected:
  // Watches a client stream while it is read, from construction to Done() (or
  // destruction): the call is cancelled when Touch() was not called for the idle timeout.
  // Not while the plane works on the call (a join at the start barrier, a push in a round).
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

  // Whether this server takes pushes now (a sharded coordinator: not while a slice is
  // missing; the workers wait in Join). OK by default.
  virtual absl::Status Serving() const { return absl::OkStatus(); }
  // How long a call may wait: `max_wait`, or less when the client's deadline is sooner.
  absl::Duration WaitLeft(const grpc::ServerContext* ctx) const;
  // The same as a time on the plane's clock.
  absl::Time Deadline(const grpc::ServerContext* ctx) const;

  DataPlane* const data_;
  const v1::WireDtype wire_dtype_;
  Admission admission_;
  PeerService peers_{this, data_};

 private:
  // Reads a push (its header, then the gradient's chunks) and hands it to the plane.
  // `*dtype`: the push's wire dtype (its PushPull reply's model goes the same way).
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

  std::atomic<bool> open_{true};
  const absl::Duration max_wait_;
  const std::string auth_token_;
  absl::Mutex bf16_mu_;
  std::shared_ptr<const std::vector<float>> bf16_source_ ABSL_GUARDED_BY(bf16_mu_);
  std::shared_ptr<const std::vector<uint16_t>> bf16_values_ ABSL_GUARDED_BY(bf16_mu_);
  std::thread watchdog_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SLICE_SERVICE_H_
