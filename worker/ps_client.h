// How a worker talks to the parameter server. The interface speaks the proto's plain
// messages; the gRPC stub is one implementation (tests can bring another).
#ifndef OMNILEARN_WORKER_PS_CLIENT_H_
#define OMNILEARN_WORKER_PS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model_layout.h"
#include "proto/omnilearn.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace omnilearn {
namespace worker {

// A PushPull whose gradient leaves while backward still computes it (PsClient::
// StartPushPull): the header at once, the tensors as they become final, then the
// trailer and the reply with the model. Destroying one before Finish cancels the push:
// the server changes nothing. Used by one thread.
class PushStream {
 public:
  virtual ~PushStream() = default;
  // These tensors (layout indices) of the gradient are final: they are sent in the
  // background (the caller is never held up by the network), each once.
  virtual void Send(const std::vector<int>& tensors) = 0;
  // Sends the tensors not sent yet, then the trailer (compute time and loss), and then
  // receives as PushPull does: the reply, and the model into `weights` with
  // `*model_version` when it moved. Errors as PushPull's.
  absl::StatusOr<v1::PushResponse> Finish(const v1::PushTrailer& trailer, uint64_t* model_version,
                                          absl::Span<float> weights) {
    absl::StatusOr<v1::PushResponse> r = FinishEarly(trailer, model_version, weights);
    if (!r.ok()) return r;
    if (absl::Status s = AwaitModel(); !s.ok()) return s;
    return r;
  }
  // As Finish, but returns once the reply and the model's header are in (`*model_version`
  // is the version `weights` will hold); the values keep arriving in the background, in
  // layout order, until AwaitModel. Nothing else of the stream may be called meanwhile.
  virtual absl::StatusOr<v1::PushResponse> FinishEarly(const v1::PushTrailer& trailer, uint64_t* model_version,
                                                       absl::Span<float> weights) = 0;
  // After FinishEarly: waits until tensor `t` (layout index) is whole in the weights, or the
  // stream ended without it (false).
  virtual bool AwaitTensor(int t) = 0;
  // After FinishEarly: waits for the end; OK once every value arrived (or none was due).
  virtual absl::Status AwaitModel() = 0;
};

class PsClient {
 public:
  virtual ~PsClient() = default;
  // Model buffers are flat float32 in layout order (layout.total_elements() values), in
  // the caller's memory: sent from where they lie, received in place.
  //
  // Sends the header and, when `initial` is not empty, the model's initial parameters.
  virtual absl::StatusOr<v1::JoinResponse> Join(const v1::JoinHeader& header, const ModelLayout& layout,
                                                absl::Span<const float> initial) = 0;
  // Writes the server's model into `weights` when its version differs from
  // `have_version`; returns the server's version. A stream that breaks part way leaves
  // `weights` partly written (the session then pulls the whole model again).
  virtual absl::StatusOr<uint64_t> Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                        absl::Span<float> weights) = 0;
  // Sends the header and, unless it reports out-of-memory, the gradient.
  virtual absl::StatusOr<v1::PushResponse> Push(const v1::PushHeader& header, const ModelLayout& layout,
                                                absl::Span<const float> gradient) = 0;
  // Push, then the model, in one round trip (the PushPull call): `weights` is written
  // and `*model_version` set when the reply allows training on and the server's model
  // differs from header.model_version(). FailedPrecondition from a server of a release
  // without PushPull.
  virtual absl::StatusOr<v1::PushResponse> PushPull(const v1::PushHeader& header, const ModelLayout& layout,
                                                    absl::Span<const float> gradient, uint64_t* model_version,
                                                    absl::Span<float> weights) = 0;
  // Opens a PushPull for `gradient` (the caller's, filled in while the push runs and
  // unchanged once sent, until Finish returns): `header` with its `trailer` set. For a
  // server that said JoinResponse.push_trailer only. Unimplemented when this client
  // cannot (the caller then pushes the whole gradient at the end).
  virtual absl::StatusOr<std::unique_ptr<PushStream>> StartPushPull(const v1::PushHeader& header,
                                                                    const ModelLayout& layout,
                                                                    absl::Span<const float> gradient) {
    return absl::UnimplementedError("this client pushes whole gradients only");
  }
  // The session's secret (JoinResponse.session_secret), sent with every later call:
  // Pull, Push, PushPull, Heartbeat, Leave. Thread-safe.
  virtual void SetSessionSecret(const std::string& secret) = 0;
  // Keeps the lease; the reply says whether to go on, rejoin or stop.
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(uint64_t worker_id) = 0;
  // `finished`: this worker completed its training (not interrupted or stopped).
  virtual absl::Status Leave(uint64_t worker_id, bool finished) = 0;
};

struct ClientOptions {
  absl::Duration rpc_timeout = absl::Minutes(10);  // bounds every call
  std::string auth_token;       // sent as "authorization: Bearer <token>" when set
  std::string tls_ca;           // PEM file of the CA that signed the server's certificate: TLS on
  std::string tls_cert;         // PEM client certificate and key, for servers that require
  std::string tls_key;          //   mutual TLS
  std::string tls_server_name;  // the name to check the server's certificate against (default: the target's host)
};

// A gRPC client for "host:port". InvalidArgument when the TLS files are incomplete or
// unreadable.
absl::StatusOr<std::unique_ptr<PsClient>> MakeGrpcPsClient(const std::string& target, const ClientOptions& options);
// The same over a given channel (e.g. grpc::Server::InProcessChannel in tests); uses
// the options' timeout and token only.
std::unique_ptr<PsClient> MakeGrpcPsClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_PS_CLIENT_H_
