// How a worker talks to the parameter server, in the worker's terms (ps_types.h): the
// gRPC client is one implementation and the only code of the worker that knows the proto;
// tests bring fakes.
#ifndef OMNILEARN_WORKER_CLIENT_PS_CLIENT_H_
#define OMNILEARN_WORKER_CLIENT_PS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/model_layout.h"
#include "worker/client/ps_types.h"

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
  // Sends the tensors not sent yet and the step's end, and returns once they are written;
  // FinishEarly then only receives. Optional (FinishEarly writes them when this was not
  // called): a client that pushes several streams one after the other uses it.
  virtual void CloseWrites(const StepEnd& end) {}
  // Sends the tensors not sent yet, then the step's end (compute time, loss, accuracy),
  // and then receives as PushPull does: the reply, and the model into `weights` with
  // `*model_version` when it moved. Errors as PushPull's.
  absl::StatusOr<PushReply> Finish(const StepEnd& end, uint64_t* model_version, absl::Span<float> weights) {
    absl::StatusOr<PushReply> r = FinishEarly(end, model_version, weights);
    if (!r.ok()) return r;
    if (absl::Status s = AwaitModel(); !s.ok()) return s;
    return r;
  }
  // As Finish, but returns once the reply and the model's header are in (`*model_version`
  // is the version `weights` will hold); the values keep arriving in the background, in the
  // server's order (ModelLayout::SendOrder: small buffers, then the layout's), until
  // AwaitModel. Nothing else of the stream may be called meanwhile.
  virtual absl::StatusOr<PushReply> FinishEarly(const StepEnd& end, uint64_t* model_version,
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
  // Joins with `layout`, and with the model's initial parameters when `initial` is not
  // empty. FailedPrecondition from a server that has no model yet when none came.
  virtual absl::StatusOr<JoinReply> Join(const JoinRequest& request, const ModelLayout& layout,
                                         absl::Span<const float> initial) = 0;
  // Writes the server's model into `weights` when its version differs from
  // `have_version`; returns the server's version. A stream that breaks part way leaves
  // `weights` partly written (the session then pulls the whole model again).
  virtual absl::StatusOr<uint64_t> Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                        absl::Span<float> weights) = 0;
  // Pull from a shard server: it first waits (bounded) until its slice holds at least
  // `min_version`. A server that holds the whole model answers as Pull.
  virtual absl::StatusOr<uint64_t> PullAtLeast(uint64_t worker_id, uint64_t have_version, uint64_t min_version,
                                               const ModelLayout& layout, absl::Span<float> weights) {
    return Pull(worker_id, have_version, layout, weights);
  }
  // Sends the step and, unless it is an out-of-memory or report-only push, the gradient.
  virtual absl::StatusOr<PushReply> Push(const PushedStep& push, const ModelLayout& layout,
                                         absl::Span<const float> gradient) = 0;
  // Push, then the model, in one round trip (the PushPull call): `weights` is written
  // and `*model_version` set when the reply allows training on and the server's model
  // differs from push.model_version. FailedPrecondition from a server of a release
  // without PushPull.
  virtual absl::StatusOr<PushReply> PushPull(const PushedStep& push, const ModelLayout& layout,
                                             absl::Span<const float> gradient, uint64_t* model_version,
                                             absl::Span<float> weights) = 0;
  // Opens a PushPull for `gradient` (the caller's, filled in while the push runs and
  // unchanged once sent, until Finish returns); the step's end (push.step.end) comes with
  // Finish. For a server that said JoinReply::push_trailer only. Unimplemented when this
  // client cannot (the caller then pushes the whole gradient at the end).
  virtual absl::StatusOr<std::unique_ptr<PushStream>> StartPushPull(const PushedStep& push, const ModelLayout& layout,
                                                                    absl::Span<const float> gradient) {
    return absl::UnimplementedError("this client pushes whole gradients only");
  }
  // The session's secret (JoinReply::session_secret), sent with every later call:
  // Pull, Push, PushPull, Heartbeat, Leave. Thread-safe.
  virtual void SetSessionSecret(const std::string& secret) = 0;
  // A new session's wire dtype (JoinReply::bfloat16) for a client that did not join itself:
  // a shard server's, in a sharded job whose coordinator answered the Join. Thread-safe.
  virtual void SetSessionBfloat16(bool bfloat16) {}
  // Keeps the lease; the answer says whether to go on, rejoin or stop.
  virtual absl::StatusOr<Action> Heartbeat(uint64_t worker_id) = 0;
  // `finished`: this worker completed its training (not interrupted or stopped).
  virtual absl::Status Leave(uint64_t worker_id, bool finished) = 0;
  // Waits up to `timeout` (real time) for this client's connection to its server, making
  // it meanwhile; true once connected. gRPC's synchronous client completes a connection's
  // handshake only while a call or a wait polls its channel (else every 5 s, its backup
  // poller), so a client that only slept between failed calls saw a handshake begun
  // meanwhile time out, and a worker back from a partition rejoined 7-15 s after the heal.
  // A client with no connection of its own answers false at once.
  virtual bool AwaitConnection(absl::Duration timeout) { return false; }
};

// Pauses `pause` of `clock`'s time before calling `client` again after a failure, spending
// the pause on the client's connection (PsClient::AwaitConnection): the whole pause, also
// once connected, so a server that answers with an error is not called in a tight loop.
inline void PauseBeforeRetry(const Clock& clock, PsClient& client, absl::Duration pause) {
  const absl::Time resume = clock.Now() + pause;
  client.AwaitConnection(pause);
  const absl::Duration left = resume - clock.Now();
  if (left > absl::ZeroDuration()) clock.SleepFor(left);
}

struct ClientOptions {
  absl::Duration rpc_timeout = absl::Minutes(10);  // bounds every call
  std::string auth_token;                          // sent as "authorization: Bearer <token>" when set
  std::string tls_ca;                              // PEM file of the CA that signed the server's certificate: TLS on
  std::string tls_cert;                            // PEM client certificate and key, for servers that require
  std::string tls_key;                             //   mutual TLS
  std::string tls_server_name;  // the name to check the server's certificate against (default: the target's host)
  // Offer bfloat16 on the wire (taken when the server runs --wire_dtype=bf16); false:
  // float32 whatever the server runs, as workers of releases before bfloat16.
  bool offer_bfloat16 = true;
};

// A gRPC client for "host:port", or for the coordinator elected in etcd
// ("etcd://HOST:PORT[,...][/KEY]": looked up at each Join, FollowingPsClient). InvalidArgument
// when the TLS files are incomplete or unreadable, or the etcd address is malformed.
absl::StatusOr<std::unique_ptr<PsClient>> MakeGrpcPsClient(const std::string& target, const ClientOptions& options);
// The same over a given channel (e.g. grpc::Server::InProcessChannel in tests); uses
// the options' timeout, token and bfloat16 offer only.
std::unique_ptr<PsClient> MakeGrpcPsClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_PS_CLIENT_H_
