// The trainer against a scripted PsClient: no server, no network. A small MLP on
// synthetic data on the CPU, a few steps each.
#include "worker/trainer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/synchronization/mutex.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

// Answers as a server in sync mode would, without training: each push moves the version;
// replies carry the next batch and samples; `actions` scripts a reply's action by push.
class ScriptedServer : public PsClient {
 public:
  absl::StatusOr<JoinReply> Join(const JoinRequest& request, const ModelLayout& layout,
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
    r.samples = Samples(4);
    r.global_samples = global_samples_;
    return r;
  }
  absl::StatusOr<uint64_t> Pull(uint64_t, uint64_t have, const ModelLayout&, absl::Span<float> weights) override {
    absl::MutexLock lock(&mu_);
    if (have != version_) std::copy(model_.begin(), model_.end(), weights.begin());
    return version_;
  }
  absl::StatusOr<PushReply> Push(const PushedStep& p, const ModelLayout&, absl::Span<const float>) override {
    absl::MutexLock lock(&mu_);
    pushed.push_back(p);
    PushReply r;
    r.action = Action::kContinue;
    r.model_version = version_;
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

  std::map<int, Action> actions;  // by push number, from 1
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

TrainerOptions Small() {
  TrainerOptions o;
  o.name = "t0";
  o.host = "here";
  o.device = "cpu";
  o.model = "mlp";
  o.dataset = "synthetic";
  o.synthetic_samples = 100;
  o.epochs = 0;
  o.max_iterations = 3;
  o.log_every = 0;
  o.bucket_bytes = 0;  // whole pushes
  return o;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST_CASE("the trainer trains the server's batch and samples, reports each step and leaves finished", "[trainer]") {
  ScriptedServer server;
  TrainerOptions o = Small();
  o.log_samples = TempPath("samples.txt");
  o.log_every = 1;
  std::vector<std::string> lines;
  o.log = [&lines](const std::string& line) { lines.push_back(line); };
  absl::StatusOr<TrainerResult> r = Train(o, server);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->iterations == 3);
  REQUIRE_FALSE(r->stopped_by_server);
  REQUIRE(server.joined.size() == 1);
  REQUIRE(server.joined[0].worker.name == "t0");
  REQUIRE(server.joined[0].worker.dataset_size == 100);
  REQUIRE(server.joined[0].worker.device == DeviceKind::kCpu);
  REQUIRE(server.pushed.size() == 3);
  REQUIRE(server.pushed[0].step.batch_size == 4);  // the join's
  REQUIRE(server.pushed[1].step.batch_size == 6);  // then each reply's
  for (size_t i = 0; i < server.pushed.size(); ++i) {
    const PushedStep& p = server.pushed[i];
    REQUIRE(p.worker_id == 1);
    REQUIRE(p.model_version == i);  // the model the reply before brought
    REQUIRE(p.step.end.compute_seconds > 0);
    REQUIRE(p.step.end.train_loss > 0);
    REQUIRE_FALSE(p.step.out_of_memory);
    REQUIRE(server.gradient_nonzero[i]);
  }
  REQUIRE(server.pushed[0].step.communication_seconds == 0);  // no earlier step
  REQUIRE(server.leaves == std::vector<bool>{true});
  // Exactly the assigned samples were trained: 4, 6, 6 of them, in order.
  std::ifstream log(o.log_samples);
  std::vector<uint64_t> trained;
  uint64_t epoch = 0, id = 0;
  while (log >> epoch >> id) trained.push_back(id);
  std::vector<uint64_t> want;
  for (size_t i = 0; i < 3; ++i)
    want.insert(want.end(), server.assigned[i][0].ids.begin(), server.assigned[i][0].ids.end());
  REQUIRE(trained == want);
  REQUIRE(r->pushes_sent == 3);
  REQUIRE(r->pushes_answered == 3);
  // What the user reads: the join, then a line per iteration, all through the sink.
  const auto has = [&lines](const std::string& prefix) {
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
  };
  REQUIRE(has("[t0] joined as worker 1: device=cpu batch=4 mode=sync") == 1);
  REQUIRE(has("[t0] it=") == 3);
  REQUIRE(has("[t0] it=1 batch=6 ") == 1);
}

TEST_CASE("a stop from the server ends training; a rejoin trains the step again", "[trainer]") {
  ScriptedServer stopping;
  stopping.actions[2] = Action::kStop;
  absl::StatusOr<TrainerResult> r = Train(Small(), stopping);
  REQUIRE(r.ok());
  REQUIRE(r->stopped_by_server);
  REQUIRE(r->iterations == 1);
  REQUIRE(stopping.leaves == std::vector<bool>{false});

  ScriptedServer rejoining;
  rejoining.actions[1] = Action::kRejoin;
  r = Train(Small(), rejoining);
  REQUIRE(r.ok());
  REQUIRE(r->iterations == 3);  // the step of the old session does not count
  REQUIRE(rejoining.joined.size() == 2);
  REQUIRE(rejoining.joined[1].resume_worker_id == 1);  // the session it replaces
  REQUIRE(rejoining.pushed.size() == 4);
  REQUIRE(rejoining.pushed[1].worker_id == 2);
}

TEST_CASE("at the last epoch's end the accuracy goes to the server alone, on the final model", "[trainer]") {
  ScriptedServer server;
  TrainerOptions o = Small();
  o.max_iterations = 0;
  o.epochs = 0.2;  // 20 of the 100 samples: 4 + 6 + 6 + 6
  o.evaluate = true;
  absl::StatusOr<TrainerResult> r = Train(o, server);
  REQUIRE(r.ok());
  REQUIRE(r->iterations == 4);
  REQUIRE(r->test_accuracy >= 0);
  REQUIRE(r->test_accuracy <= 1);
  REQUIRE(server.pushed.size() == 5);
  const PushedStep& report = server.pushed.back();
  REQUIRE(report.step.report_only);
  REQUIRE(report.step.end.test_accuracy == r->test_accuracy);
  for (size_t i = 0; i < 4; ++i) REQUIRE_FALSE(server.pushed[i].step.end.test_accuracy.has_value());
}

TEST_CASE("options the trainer cannot run with are refused before it joins", "[trainer]") {
  ScriptedServer server;
  TrainerOptions o = Small();
  o.max_iterations = 0;  // and epochs 0: no end
  REQUIRE(absl::IsInvalidArgument(Train(o, server).status()));
  o = Small();
  o.dataset = "imagenet";
  REQUIRE(absl::IsInvalidArgument(Train(o, server).status()));
  REQUIRE(absl::IsInvalidArgument(ParseWarmup("sometimes").status()));
  REQUIRE(*ParseWarmup("off") == Warmup::kOff);
  REQUIRE(server.joined.empty());
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
