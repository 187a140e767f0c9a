// How a worker talks to the parameter server. The interface speaks the proto's plain
// messages; the gRPC stub is one implementation (tests can bring another).
#ifndef OMNILEARN_WORKER_PS_CLIENT_H_
#define OMNILEARN_WORKER_PS_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model_layout.h"
#include "proto/omnilearn.pb.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace omnilearn {
namespace worker {

class PsClient {
 public:
  virtual ~PsClient() = default;
  // Sends the header and, when `initial` is set, the model's initial parameters.
  virtual absl::StatusOr<v1::JoinResponse> Join(const v1::JoinHeader& header, const ModelLayout& layout,
                                                const std::vector<float>* initial) = 0;
  // Fills `weights` (layout.total_elements()) when the server's version differs from
  // `have_version`; returns the server's version.
  virtual absl::StatusOr<uint64_t> Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                        std::vector<float>* weights) = 0;
  // Sends the header and, unless it reports out-of-memory, the gradient.
  virtual absl::StatusOr<v1::PushResponse> Push(const v1::PushHeader& header, const ModelLayout& layout,
                                                const std::vector<float>& gradient) = 0;
  virtual absl::Status Leave(uint64_t worker_id) = 0;
};

// A gRPC client for "host:port". `rpc_timeout` bounds every call.
std::unique_ptr<PsClient> MakeGrpcPsClient(const std::string& target, absl::Duration rpc_timeout);
// The same over a given channel (e.g. grpc::Server::InProcessChannel in tests).
std::unique_ptr<PsClient> MakeGrpcPsClient(std::shared_ptr<grpc::Channel> channel, absl::Duration rpc_timeout);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_PS_CLIENT_H_
