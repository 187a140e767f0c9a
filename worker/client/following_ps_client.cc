#include "worker/client/following_ps_client.h"

#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace worker {

absl::StatusOr<JoinReply> FollowingPsClient::Join(const JoinRequest& request, const ModelLayout& layout,
                                                  absl::Span<const float> initial) {
  absl::StatusOr<std::string> address = resolve_();
  if (absl::IsFailedPrecondition(address.status())) return address.status();  // the job finished
  if (!address.ok())
    return absl::UnavailableError(absl::StrCat("no coordinator to join: ", address.status().message()));
  std::shared_ptr<PsClient> client;
  {
    absl::MutexLock lock(&mu_);
    if (client_ == nullptr || *address != address_) {
      absl::StatusOr<std::unique_ptr<PsClient>> made = factory_(*address);
      if (!made.ok()) return made.status();
      client_ = *std::move(made);
      address_ = *address;
    }
    client = client_;
  }
  return client->Join(request, layout, initial);
}

absl::StatusOr<std::shared_ptr<PsClient>> FollowingPsClient::current() {
  absl::MutexLock lock(&mu_);
  if (client_ == nullptr) return absl::UnavailableError("no coordinator joined yet");
  return client_;
}

std::string FollowingPsClient::address() {
  absl::MutexLock lock(&mu_);
  return address_;
}

absl::StatusOr<uint64_t> FollowingPsClient::Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                                 absl::Span<float> weights) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (!c.ok()) return c.status();
  return (*c)->Pull(worker_id, have_version, layout, weights);
}

absl::StatusOr<uint64_t> FollowingPsClient::PullAtLeast(uint64_t worker_id, uint64_t have_version, uint64_t min_version,
                                                        const ModelLayout& layout, absl::Span<float> weights) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (!c.ok()) return c.status();
  return (*c)->PullAtLeast(worker_id, have_version, min_version, layout, weights);
}

absl::StatusOr<PushReply> FollowingPsClient::Push(const PushedStep& push, const ModelLayout& layout,
                                                  absl::Span<const float> gradient) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (!c.ok()) return c.status();
  return (*c)->Push(push, layout, gradient);
}

absl::StatusOr<PushReply> FollowingPsClient::PushPull(const PushedStep& push, const ModelLayout& layout,
                                                      absl::Span<const float> gradient, uint64_t* model_version,
                                                      absl::Span<float> weights) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (!c.ok()) return c.status();
  return (*c)->PushPull(push, layout, gradient, model_version, weights);
}

absl::StatusOr<std::unique_ptr<PushStream>> FollowingPsClient::StartPushPull(const PushedStep& push,
                                                                             const ModelLayout& layout,
                                                                             absl::Span<const float> gradient) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (!c.ok()) return c.status();
  return (*c)->StartPushPull(push, layout, gradient);
}

void FollowingPsClient::SetSessionSecret(const std::string& secret) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (c.ok()) (*c)->SetSessionSecret(secret);
}

void FollowingPsClient::SetSessionBfloat16(bool bfloat16) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (c.ok()) (*c)->SetSessionBfloat16(bfloat16);
}

absl::StatusOr<Action> FollowingPsClient::Heartbeat(uint64_t worker_id) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (!c.ok()) return c.status();
  return (*c)->Heartbeat(worker_id);
}

absl::Status FollowingPsClient::Leave(uint64_t worker_id, bool finished) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  if (!c.ok()) return c.status();
  return (*c)->Leave(worker_id, finished);
}

bool FollowingPsClient::AwaitConnection(absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<PsClient>> c = current();
  return c.ok() && (*c)->AwaitConnection(timeout);
}

}  // namespace worker
}  // namespace omnilearn
