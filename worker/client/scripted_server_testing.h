// For tests: a PsClient that answers as a sync server would, without training or a
// network. Each applied push moves the version; replies carry the next batch and
// samples; `actions` scripts a reply's action by push; `idle_replies` makes the worker
// wait (an idle reply per push) before samples come back.
#ifndef OMNILEARN_WORKER_CLIENT_SCRIPTED_SERVER_TESTING_H_
#define OMNILEARN_WORKER_CLIENT_SCRIPTED_SERVER_TESTING_H_

#include <algorithm>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "worker/client/ps_client.h"

namespace omnilearn {
namespace worker {

class ScriptedServer : public PsClient {
 public:
  absl::StatusOr<JoinReply> Join(const JoinRequest& request, const ModelLayout&,
                                 absl::Span<const float> initial) override {
    absl::MutexLock lock(&mu_);
    if (model_.empty() && initial.empty()) return absl::FailedPreconditionError("no model yet");
    if (model_.empty()) model_.assign(initial.begin(), initial.end());
    joined.push_back(request);
    JoinReply r;
    r.worker_id = ++worker_id_;
    r.lease_seconds = 60;
    r.mode = Mode::kSync;
    r.batch_size = 4;
    r.global_samples = global_samples_;
    if (idle_replies > 0) {
      r.idle = true;
    } else {
      r.samples = Samples(4);
    }
    return r;
  }
  absl::StatusOr<uint64_t> Pull(uint64_t, uint64_t have, const ModelLayout&, absl::Span<float> weights) override {
    absl::MutexLock lock(&mu_);
    if (have != version_) std::copy(model_.begin(), model_.end(), weights.begin());
    return version_;
  }
  // Reports, and an idle worker's waits: the idle ones answered idle until `idle_replies`
  // ran out, then with samples; `global_samples_when_idle` (when set) is the job's count
  // an idle reply tells.
  absl::StatusOr<PushReply> Push(const PushedStep& p, const ModelLayout&, absl::Span<const float>) override {
    absl::MutexLock lock(&mu_);
    pushed.push_back(p);
    PushReply r;
    r.action = Action::kContinue;
    r.model_version = version_;
    if (p.step.idle) {
      if (global_samples_when_idle > 0) global_samples_ = global_samples_when_idle;
      if (idle_replies > 0 && --idle_replies > 0) {
        r.idle = true;
      } else if (global_samples_when_idle == 0) {
        r.samples = Samples(4);
      } else {
        r.idle = true;
      }
    }
    r.global_samples = global_samples_;
    return r;
  }
  absl::StatusOr<PushReply> PushPull(const PushedStep& p, const ModelLayout&, absl::Span<const float> gradient,
                                     uint64_t* model_version, absl::Span<float> weights) override {
    absl::MutexLock lock(&mu_);
    pushed.push_back(p);
    gradient_nonzero.push_back(std::any_of(gradient.begin(), gradient.end(), [](float g) { return g != 0; }));
    PushReply r;
    auto scripted = actions.find(static_cast<int>(pushed.size()));
    r.action = scripted == actions.end() ? Action::kContinue : scripted->second;
    if (r.action != Action::kContinue) return r;
    r.applied = true;
    r.model_version = ++version_;
    global_samples_ += p.step.batch_size;
    r.global_samples = global_samples_;
    r.next_batch_size = 6;
    r.samples = Samples(6);
    *model_version = version_;
    std::copy(model_.begin(), model_.end(), weights.begin());
    return r;
  }
  void SetSessionSecret(const std::string&) override {}
  absl::StatusOr<Action> Heartbeat(uint64_t) override { return Action::kContinue; }
  absl::Status Leave(uint64_t, bool finished) override {
    absl::MutexLock lock(&mu_);
    leaves.push_back(finished);
    return absl::OkStatus();
  }

  // Set before the worker joins.
  std::map<int, Action> actions;  // by push number, from 1
  int idle_replies = 0;  // > 0: the join answers idle, and so do idle pushes before the idle_replies-th (samples)
  uint64_t global_samples_when_idle = 0;

  // What the worker sent.
  std::vector<JoinRequest> joined;
  std::vector<PushedStep> pushed;
  std::vector<bool> gradient_nonzero;
  std::vector<bool> leaves;
  std::vector<Assignment> assigned;  // every assignment handed out, in order

 private:
  // The next `n` sample ids, in order, wrapping at the data set's 100.
  Assignment Samples(int n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    SampleSpan span{0, {}};
    for (int i = 0; i < n; ++i) span.ids.push_back(next_sample_++ % 100);
    assigned.push_back({span});
    return {span};
  }
  absl::Mutex mu_;
  std::vector<float> model_;
  uint64_t version_ = 0, worker_id_ = 0, global_samples_ = 0, next_sample_ = 0;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_SCRIPTED_SERVER_TESTING_H_
