// The client of a coordinator found through etcd (--server=etcd://...; the coordinator's
// election, server/daemon/election.h): each Join first asks where the coordinator is now,
// and an address other than the last gets a client of its own. Every other call goes to
// the client of the last Join, so a session that lost its coordinator rejoins the one
// elected after it, as it rejoins a restarted one.
#ifndef OMNILEARN_WORKER_CLIENT_FOLLOWING_PS_CLIENT_H_
#define OMNILEARN_WORKER_CLIENT_FOLLOWING_PS_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "worker/client/ps_client.h"

namespace omnilearn {
namespace worker {

// Thread-safe as its clients are.
class FollowingPsClient : public PsClient {
 public:
  using Resolve = std::function<absl::StatusOr<std::string>()>;
  using Factory = std::function<absl::StatusOr<std::unique_ptr<PsClient>>(const std::string& address)>;
  FollowingPsClient(Resolve resolve, Factory factory) : resolve_(std::move(resolve)), factory_(std::move(factory)) {}

  // Unavailable (retried by the session) while no coordinator can be found; the resolver's
  // FailedPrecondition (the job finished) as it is.
  absl::StatusOr<JoinReply> Join(const JoinRequest& request, const ModelLayout& layout,
                                 absl::Span<const float> initial) override;
  absl::StatusOr<uint64_t> Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                absl::Span<float> weights) override;
  absl::StatusOr<uint64_t> PullAtLeast(uint64_t worker_id, uint64_t have_version, uint64_t min_version,
                                       const ModelLayout& layout, absl::Span<float> weights) override;
  absl::StatusOr<PushReply> Push(const PushedStep& push, const ModelLayout& layout,
                                 absl::Span<const float> gradient) override;
  absl::StatusOr<PushReply> PushPull(const PushedStep& push, const ModelLayout& layout,
                                     absl::Span<const float> gradient, uint64_t* model_version,
                                     absl::Span<float> weights) override;
  absl::StatusOr<std::unique_ptr<PushStream>> StartPushPull(const PushedStep& push, const ModelLayout& layout,
                                                            absl::Span<const float> gradient) override;
  void SetSessionSecret(const std::string& secret) override;
  void SetSessionBfloat16(bool bfloat16) override;
  absl::StatusOr<Action> Heartbeat(uint64_t worker_id) override;
  absl::Status Leave(uint64_t worker_id, bool finished) override;
  bool AwaitConnection(absl::Duration timeout) override;

  // The address the calls go to ("" before the first Join).
  std::string address();

 private:
  // The client of the last Join; Unavailable before any.
  absl::StatusOr<std::shared_ptr<PsClient>> current();

  const Resolve resolve_;
  const Factory factory_;
  absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<PsClient> client_ ABSL_GUARDED_BY(mu_);
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_FOLLOWING_PS_CLIENT_H_
