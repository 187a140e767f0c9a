#include "server/control/parameter_server_core.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "common/await_state.h"
#include "common/clock.h"

namespace omnilearn {
namespace server {
namespace {

constexpr int kParams = 6;

ServerOptions Options(Mode mode, int num_workers) {
  ServerOptions o;
  o.mode = mode;
  o.num_workers = num_workers;
  o.round_timeout = absl::Seconds(10);
  o.controller.global_batch = 8;
  o.controller.policy = controller::Policy::kOff;
  o.optimizer.learning_rate = 1.0;  // w -= g: the arithmetic is easy to check
  o.optimizer.momentum = 0;
  o.optimizer.weight_decay = 0;
  return o;
}

JoinInfo Info(const std::string& name, bool with_params) {
  JoinInfo j;
  j.name = name;
  j.layout = *ModelLayout::Create({{"w", {2, 2}}, {"b", {2}}});
  if (with_params) j.initial_parameters = std::vector<float>(kParams, 0.0f);
  return j;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

PushInfo Grad(WorkerId id, int64_t batch, uint64_t version) {
  PushInfo p;
  p.id = id;
  p.batch = batch;
  p.compute_seconds = 0.01;
  p.version = version;
  return p;
}

std::vector<float> Weights(ParameterServerCore& core, WorkerId id) {
  auto snap = core.Pull(id, ~0ull);
  REQUIRE(snap.ok());
  return *snap->weights;
}

WorkerSnapshot WorkerOf(const ServerSnapshot& s, WorkerId id) {
  for (const WorkerSnapshot& w : s.workers) {
    if (w.id == id) return w;
  }
  FAIL("no worker " << id);
  return {};
}
WorkerState StateOf(const ServerSnapshot& s, WorkerId id) { return WorkerOf(s, id).state; }

// The shared Options (lr 1, no momentum) on a fake clock, with round, lease and start
// timeouts that only the clock's advance can reach.
ServerOptions FakeTimed(Mode mode, int num_workers, const FakeClock* clock) {
  ServerOptions o = Options(mode, num_workers);
  o.clock = clock;
  o.lease = absl::Seconds(60);
  o.start_timeout = absl::Minutes(5);
  return o;
}

// Pushes accepted so far (a sync push is counted when it joins its round).
uint64_t AppliedPushes(const ParameterServerCore& core) {
  const ServerSnapshot s = core.Snapshot();
  auto it = s.pushes_by_result.find("applied");
  return it == s.pushes_by_result.end() ? 0 : it->second;
}

// Waits (bounded) until `pred` holds: for states another thread reaches.
template <typename Pred>
void AwaitState(Pred pred) {
  REQUIRE(omnilearn::AwaitState(pred));
}

// Joins "a" (with the model) and "b" on a fake clock: the first round starts with both.
std::pair<JoinResult, JoinResult> JoinTwoOnClock(ParameterServerCore& core, const FakeClock& clock) {
  JoinResult a, b;
  std::thread ja([&] { a = *core.Join(Info("a", true), clock.Now() + absl::Seconds(5)); });
  AwaitState([&] { return core.Snapshot().parameter_count > 0; });
  b = *core.Join(Info("b", false), clock.Now() + absl::Seconds(5));
  ja.join();
  return {a, b};
}

// Joins n workers "w0".."w{n-1}": w0 brings the model, the others wait for it.
std::vector<JoinResult> JoinAll(ParameterServerCore& core, int n) {
  std::vector<JoinResult> out(n);
  std::vector<std::thread> threads;
  threads.emplace_back([&] { out[0] = *core.Join(Info("w0", true), Soon()); });
  AwaitState([&] { return core.Snapshot().parameter_count > 0; });
  for (int i = 1; i < n; ++i) {
    threads.emplace_back([&, i] { out[i] = *core.Join(Info("w" + std::to_string(i), false), Soon()); });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST_CASE("a sync round applies exactly the batch-weighted mean", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  const auto joined = JoinAll(*core, 2);  // w0 waits for w1: the first round starts with both
  const JoinResult &a = joined[0], &b = joined[1];
  REQUIRE(a.batch == 4);
  REQUIRE(b.batch == 4);
  PushResult ra, rb;
  // Gradients 1 and 5 at batch 4 each: mean 3 (unequal batches: sync_round_test).
  std::thread ta([&] { ra = *core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon()); });
  rb = *core->Push(Grad(b.id, 4, 0), std::vector<float>(kParams, 5.0f), Soon());
  ta.join();
  REQUIRE(ra.applied);
  REQUIRE(rb.version == 1);
  REQUIRE(ra.version == 1);
  REQUIRE(Weights(*core, a.id) == std::vector<float>(kParams, -3.0f));
  REQUIRE(core->Snapshot().rounds == 1);
}

TEST_CASE("a worker's optimizer comes with its model; a later worker's must be the same; rates come with pushes",
          "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  WantedOptimizer sgd;  // plain SGD at 0.5 for w, 0.25 for b
  sgd.kind = OptimizerKind::kSgd;
  sgd.lr = 0.5;
  sgd.groups = {{{"w"}, 0.5, 0}, {{"b"}, 0.25, 0}};
  JoinInfo first = Info("a", true);
  first.optimizer = sgd;
  JoinInfo other = Info("b", false);
  other.optimizer = sgd;
  other.optimizer->groups[1].lr = 0.5;
  JoinResult a, b;
  std::thread ta([&] { a = *core->Join(first, Soon()); });
  AwaitState([&] { return core->Snapshot().workers.size() == 1; });
  const absl::Status refused = core->Join(other, Soon()).status();
  REQUIRE(refused.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(absl::StrContains(refused.message(), "the job runs SGD(lr=0.5"));
  REQUIRE(absl::StrContains(refused.message(), "from a, whose model the job took"));
  other.optimizer = sgd;
  b = *core->Join(other, Soon());  // the same optimizer
  ta.join();
  auto round = [&](std::vector<double> rates) {
    PushInfo pa = Grad(a.id, 4, core->Snapshot().version), pb = Grad(b.id, 4, core->Snapshot().version);
    pa.group_lr = std::move(rates);
    std::thread t([&] { REQUIRE(core->Push(pa, std::vector<float>(kParams, 1.0f), Soon()).ok()); });
    REQUIRE(core->Push(pb, std::vector<float>(kParams, 1.0f), Soon()).ok());
    t.join();
  };
  round({});
  REQUIRE(Weights(*core, a.id) == std::vector<float>{-0.5f, -0.5f, -0.5f, -0.5f, -0.25f, -0.25f});
  round({0.125, 0.0625});  // a's scheduler lowered both rates
  REQUIRE(Weights(*core, a.id) == std::vector<float>{-0.625f, -0.625f, -0.625f, -0.625f, -0.3125f, -0.3125f});
  PushInfo bad = Grad(a.id, 4, 2);
  bad.group_lr = {0.1};  // one rate for two groups
  REQUIRE(absl::StrContains(core->Push(bad, std::vector<float>(kParams, 1.0f), Soon()).status().message(),
                            "1 learning rates for the job's 2 param groups"));
}

TEST_CASE("local steps: the workers are told, their optimizers stay theirs, the server's is the outer one", "[core]") {
  ServerOptions o = Options(Mode::kSync, 1);  // SGD at lr 1
  o.local_steps = 8;
  auto core = *ParameterServerCore::Create(o);
  JoinInfo info = Info("a", true);
  WantedOptimizer adamw;  // the inner optimizer: stepped by the worker, never adopted
  adamw.kind = OptimizerKind::kAdamW;
  adamw.lr = 0.01;
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.999;
  adamw.eps = 1e-8;
  info.optimizer = adamw;
  const absl::Status refused = core->Join(info, Soon()).status();  // a worker that would push gradients
  REQUIRE(absl::StrContains(refused.message(), "which this worker does not take (a release before them)"));
  info.takes_local_steps = true;
  const JoinResult a = *core->Join(info, Soon());
  REQUIRE(a.local_steps == 8);
  // The round's push is its pseudo-gradient: the outer SGD moves the model by lr times it.
  REQUIRE(core->Push(Grad(a.id, a.batch, 0), std::vector<float>(kParams, 0.25f), Soon()).ok());
  REQUIRE(Weights(*core, a.id) == std::vector<float>(kParams, -0.25f));
}

TEST_CASE("a push must carry the batch it was assigned, a finite loss, a sane time and accuracy", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kAsync, 1));
  const JoinResult a = *core->Join(Info("a", true), Soon());
  REQUIRE(a.batch == 8);
  const std::vector<float> before = Weights(*core, a.id);
  auto refused = [&](PushInfo p, const std::string& says) {
    absl::Status s = core->Push(p, std::vector<float>(kParams, 1.0f), Soon()).status();
    INFO(s.message());
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(absl::StrContains(s.message(), says));
  };
  refused(Grad(a.id, int64_t{1} << 30, 0), "out of range");  // the async step would scale by b/B
  refused(Grad(a.id, 7, 0), "the server assigned 8");        // not the assigned batch
  PushInfo nan_loss = Grad(a.id, 8, 0);
  nan_loss.train_loss = NAN;
  refused(nan_loss, "train loss must be finite");
  PushInfo slow = Grad(a.id, 8, 0);
  slow.compute_seconds = 1e9;
  refused(slow, "compute seconds must be in");
  PushInfo accuracy = Grad(a.id, 8, 0);
  accuracy.test_accuracy = 1.5;
  refused(accuracy, "test accuracy must be in [0, 1]");
  PushInfo future = Grad(a.id, 8, 7);
  refused(future, "newer than the server's");
  // Nothing of it reached the model.
  REQUIRE(Weights(*core, a.id) == before);
  REQUIRE(core->Snapshot().version == 0);
  REQUIRE(core->Push(Grad(a.id, 8, 0), std::vector<float>(kParams, 1.0f), Soon())->applied);
}

TEST_CASE("a worker that misses the round deadline is dropped and rejoins", "[core]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kSync, 3, &clock);
  o.round_timeout = absl::Seconds(30);
  o.controller.global_batch = 9;
  auto core = *ParameterServerCore::Create(o);
  const auto j = JoinAll(*core, 3);
  PushResult r0, r1;
  std::thread p0([&] { r0 = *core->Push(Grad(j[0].id, 3, 0), std::vector<float>(kParams, 2.0f), Soon()); });
  std::thread p1([&] { r1 = *core->Push(Grad(j[1].id, 3, 0), std::vector<float>(kParams, 2.0f), Soon()); });
  AwaitState([&] { return AppliedPushes(*core) == 2; });  // both wait in the round for w2
  clock.Advance(absl::Seconds(29));
  REQUIRE(core->version() == 0);    // not yet
  clock.Advance(absl::Seconds(2));  // past the round's deadline: w2 is dropped, the round closes
  p0.join();
  p1.join();
  REQUIRE(r0.applied);
  REQUIRE(r0.version == 1);
  REQUIRE(Weights(*core, j[0].id) == std::vector<float>(kParams, -2.0f));
  // w2 is out; its share went to the others: 9 = 5 + 4 (equal split of 9 over 2).
  ServerSnapshot s = core->Snapshot();
  REQUIRE(StateOf(s, j[2].id) == WorkerState::kDropped);
  REQUIRE(r0.next_batch + r1.next_batch == 9);
  // The next round does not wait for it.
  std::thread p2([&] { r1 = *core->Push(Grad(j[1].id, 4, 1), std::vector<float>(kParams, 1.0f), Soon()); });
  r0 = *core->Push(Grad(j[0].id, 5, 1), std::vector<float>(kParams, 1.0f), Soon());
  p2.join();
  REQUIRE(r0.version == 2);
  // It comes back with a gradient for version 0: late, not applied, readmitted.
  PushResult late = *core->Push(Grad(j[2].id, 3, 0), std::vector<float>(kParams, 100.0f), Soon());
  REQUIRE_FALSE(late.applied);
  REQUIRE(late.version == 2);
  REQUIRE(late.next_batch == 3);
  REQUIRE(Weights(*core, j[0].id) == std::vector<float>(kParams, -3.0f));
  REQUIRE(StateOf(core->Snapshot(), j[2].id) == WorkerState::kPending);  // by id: w1 and w2 join in any order
}

TEST_CASE("leaving mid-round lets the round close", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  const auto joined = JoinAll(*core, 2);
  const JoinResult &a = joined[0], &b = joined[1];
  PushResult ra;
  std::thread ta([&] { ra = *core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon()); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.count("applied") == 1; });  // a waits in the round
  REQUIRE(core->Leave(b.id).ok());
  ta.join();
  REQUIRE(ra.version == 1);
  REQUIRE(ra.next_batch == 8);
  REQUIRE(core->Leave(b.id).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("async pushes apply on arrival with staleness accounting", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kAsync, 2));
  const auto joined = JoinAll(*core, 2);
  const JoinResult &a = joined[0], &b = joined[1];
  // a: fresh, step = lr * b/B * min(1, 2/1) = 4/8 -> w = -0.5 * 2 = -1
  PushResult r1 = *core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 2.0f), Soon());
  REQUIRE(r1.version == 1);
  REQUIRE(r1.staleness == 0);
  REQUIRE(Weights(*core, a.id) == std::vector<float>(kParams, -1.0f));
  // b trained on version 0: staleness 1, not damped with 2 workers (2/(1+1) = 1).
  PushResult r2 = *core->Push(Grad(b.id, 4, 0), std::vector<float>(kParams, 2.0f), Soon());
  REQUIRE(r2.version == 2);
  REQUIRE(r2.staleness == 1);
  REQUIRE(Weights(*core, a.id) == std::vector<float>(kParams, -2.0f));
  // a trained on version 0 again, now 2 behind: damped by 2/3.
  PushResult r3 = *core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 3.0f), Soon());
  REQUIRE(r3.staleness == 2);
  const float expected = -2.0f - 0.5f * (2.0f / 3.0f) * 3.0f;
  for (float w : Weights(*core, a.id)) REQUIRE(w == Approx(expected));
  ServerSnapshot s = core->Snapshot();
  REQUIRE(s.staleness_counts[0] == 1);
  REQUIRE(s.staleness_counts[1] == 1);
  REQUIRE(s.staleness_counts[2] == 1);
  REQUIRE(s.pushes_by_result["applied"] == 3);
}

TEST_CASE("async Adam: workers get the weights stepped ahead by the other live workers' steps", "[core]") {
  // [prediction][staleness damping]
  std::vector<float> pulled[2][2];
  std::vector<int64_t> batches;
  for (bool predict : {false, true}) {
    for (bool damping : {false, true}) {
      ServerOptions o = Options(Mode::kAsync, 3);
      o.optimizer.kind = OptimizerKind::kAdamW;
      o.optimizer.learning_rate = 0.1;
      o.async_rule.adam_weight_prediction = predict;
      o.async_rule.staleness_damping = damping;
      auto core = *ParameterServerCore::Create(o);
      const auto joined = JoinAll(*core, 3);
      REQUIRE(core->Push(Grad(joined[0].id, joined[0].batch, 0), std::vector<float>(kParams, 2.0f), Soon()).ok());
      pulled[predict][damping] = Weights(*core, joined[1].id);
      batches = {joined[0].batch, joined[1].batch, joined[2].batch};
    }
  }
  // Off: the weights as they are (they moved from 0). On: the two other workers' steps
  // ahead, no pace measured yet: one each, sized by the square-root rule against the
  // pusher's (B = 8 as 3, 3, 2: not simply 2).
  const double ahead = (std::sqrt(batches[1]) + std::sqrt(batches[2])) / std::sqrt(batches[0]);
  REQUIRE(ahead != Approx(2));
  for (int i = 0; i < kParams; ++i) {
    REQUIRE(pulled[0][0][i] < 0);
    REQUIRE(pulled[1][0][i] == Approx((1 + ahead) * pulled[0][0][i]));
  }
  // Damping lowers beta1 (a different first step), but not under the prediction.
  REQUIRE(pulled[0][1] != pulled[0][0]);
  REQUIRE(pulled[1][1] == pulled[1][0]);
}

TEST_CASE("async Adam: a worker that pushes 4x less often than its peer is given 4 of the peer's steps", "[core]") {
  // The same pushes on three cores: prediction off, on with every push at one instant (no
  // pace measured: one step per peer), on with the pushes spread on the clock (a every
  // second, b every 4). Damping off everywhere, so beta1 and the steps are the same.
  std::vector<float> pulled[3];
  for (int run = 0; run < 3; ++run) {
    FakeClock clock;
    ServerOptions o = FakeTimed(Mode::kAsync, 2, &clock);
    o.optimizer.kind = OptimizerKind::kAdamW;
    o.optimizer.learning_rate = 0.1;
    o.async_rule.adam_weight_prediction = run > 0;
    o.async_rule.staleness_damping = false;
    auto core = *ParameterServerCore::Create(o);
    const std::pair<JoinResult, JoinResult> joined = JoinTwoOnClock(*core, clock);
    const JoinResult &a = joined.first, &b = joined.second;
    const absl::Time start = clock.Now();
    auto push = [&](const JoinResult& w, int second) {  // the seconds never go back
      if (run == 2) clock.Advance(start + absl::Seconds(second) - clock.Now());
      REQUIRE(core->Push(Grad(w.id, w.batch, core->version()), std::vector<float>(kParams, 2.0f), Soon()).ok());
    };
    for (const auto& [w, second] : std::vector<std::pair<const JoinResult*, int>>{
             {&a, 0}, {&b, 0}, {&a, 1}, {&a, 2}, {&a, 3}, {&a, 4}, {&b, 4}}) {
      push(*w, second);
    }
    pulled[run] = Weights(*core, b.id);
  }
  for (int i = 0; i < kParams; ++i) {
    const float last_step = pulled[1][i] - pulled[0][i];  // one step ahead of the weights
    REQUIRE(last_step != 0);
    REQUIRE(pulled[2][i] - pulled[0][i] == Approx(4 * last_step));
  }
}

TEST_CASE("validation errors leave the model bytes unchanged", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kAsync, 1));
  JoinResult a = *core->Join(Info("a", true), Soon());
  REQUIRE(core->Push(Grad(a.id, 8, 0), std::vector<float>(kParams, 1.0f), Soon()).ok());
  const std::vector<float> before = Weights(*core, a.id);
  const uint64_t version = core->Snapshot().version;

  std::vector<float> nan(kParams, 1.0f);
  nan[2] = std::nanf("");
  std::vector<float> inf(kParams, 1.0f);
  inf[0] = INFINITY;
  REQUIRE(core->Push(Grad(a.id, 8, 1), nan, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(core->Push(Grad(a.id, 8, 1), inf, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(core->Push(Grad(a.id, 8, 1), std::vector<float>(kParams + 1, 1.0f), Soon()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(core->Push(Grad(a.id, 0, 1), std::vector<float>(kParams, 1.0f), Soon()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(core->Push(Grad(a.id, 8, 7), std::vector<float>(kParams, 1.0f), Soon()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  PushInfo bad_time = Grad(a.id, 8, 1);
  bad_time.compute_seconds = std::nan("");
  REQUIRE(core->Push(bad_time, std::vector<float>(kParams, 1.0f), Soon()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(core->Push(Grad(999, 8, 1), std::vector<float>(kParams, 1.0f), Soon()).status().code() ==
          absl::StatusCode::kNotFound);
  REQUIRE(Weights(*core, a.id) == before);
  ServerSnapshot s = core->Snapshot();
  REQUIRE(s.version == version);
  REQUIRE(s.pushes_by_result["invalid"] == 6);
  REQUIRE(s.pushes_by_result["unknown_worker"] == 1);
}

TEST_CASE("joins are validated", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kSync, 1));
  REQUIRE(core->Join(Info("a", false), Soon()).status().code() == absl::StatusCode::kFailedPrecondition);
  JoinInfo nan = Info("a", true);
  (*nan.initial_parameters)[1] = NAN;
  REQUIRE(core->Join(nan, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(core->Join(Info("", true), Soon()).status().code() == absl::StatusCode::kInvalidArgument);
  JoinInfo huge_data = Info("a", true);
  huge_data.dataset_size = uint64_t{1} << 62;  // its permutation would not fit any memory
  REQUIRE(core->Join(huge_data, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
  const JoinResult first = *core->Join(Info("a", true), Soon());
  JoinInfo other = Info("b", false);
  other.layout = *ModelLayout::Create({{"w", {4}}, {"b", {2}}});
  REQUIRE(core->Join(other, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
  // A second process under a live worker's name is refused and changes nothing...
  absl::Status taken = core->Join(Info("a", false), Soon()).status();
  REQUIRE(taken.code() == absl::StatusCode::kAlreadyExists);
  REQUIRE(absl::StrContains(taken.message(), "--name"));
  REQUIRE(core->Snapshot().workers.size() == 1);
  // ...and so is one that names the live session's id without its secret...
  JoinInfo resume = Info("a", false);
  resume.resume_id = first.id;
  resume.resume_secret = "not the secret";
  REQUIRE(core->Join(resume, Soon()).status().code() == absl::StatusCode::kAlreadyExists);
  // ...while the same process, rejoining with its old id and secret, replaces its session.
  resume.resume_secret = first.secret;
  JoinResult again = *core->Join(resume, Soon());
  REQUIRE(again.id == 2);
  REQUIRE(core->Pull(1, 0).status().code() == absl::StatusCode::kNotFound);
  REQUIRE(again.batch == 8);
}

TEST_CASE("a worker listing the same tensors in another order trains the same model", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kAsync, 1));
  const JoinResult a = *core->Join(Info("a", true), Soon());
  JoinInfo reordered = Info("b", false);
  reordered.layout = *ModelLayout::Create({{"b", {2}}, {"w", {2, 2}}});
  const JoinResult b = *core->Join(reordered, Soon());
  REQUIRE(*core->Layout() == Info("a", true).layout);  // the server's order: chunks are addressed by name
  REQUIRE(core->Push(Grad(a.id, 8, 0), std::vector<float>(kParams, 1.0f), Soon()).ok());
  REQUIRE(core->Snapshot().parameter_count == kParams);
  // Another shape under a known name is still another model.
  JoinInfo other = Info("c", false);
  other.layout = *ModelLayout::Create({{"b", {2}}, {"w", {4}}});
  REQUIRE(core->Join(other, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("an untrained model nobody uses is replaced by the next worker's; a trained one is not", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kAsync, 1));
  const JoinResult broken = *core->Join(Info("broken", true), Soon());
  REQUIRE(core->Leave(broken.id).ok());  // left before training
  JoinInfo other = Info("b", false);
  other.layout = *ModelLayout::Create({{"v", {3}}});
  // Without parameters: told to send them (the worker's session then does).
  REQUIRE(core->Join(other, Soon()).status().code() == absl::StatusCode::kFailedPrecondition);
  other.initial_parameters = std::vector<float>(3, 0.5f);
  const JoinResult b = *core->Join(other, Soon());
  REQUIRE(core->Snapshot().parameter_count == 3);
  REQUIRE(core->Push(Grad(b.id, 8, 0), std::vector<float>(3, 1.0f), Soon()).ok());
  REQUIRE(core->Leave(b.id).ok());
  // Trained: the model stays, another layout is an error.
  JoinInfo third = Info("c", true);
  REQUIRE(core->Join(third, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a crashed worker's name is free again once its lease expired", "[core][clock]") {
  FakeClock clock;
  auto core = *ParameterServerCore::Create(FakeTimed(Mode::kAsync, 1, &clock));
  REQUIRE(core->Join(Info("a", true), clock.Now() + absl::Seconds(1)).ok());
  REQUIRE(core->Join(Info("a", false), clock.Now() + absl::Seconds(1)).status().code() ==
          absl::StatusCode::kAlreadyExists);
  clock.Advance(absl::Seconds(61));
  REQUIRE(core->Join(Info("a", false), clock.Now() + absl::Seconds(1)).ok());
  // Its worker may come back (cut off, not dead): awaited for one lease, no longer.
  REQUIRE(core->RejoinAwaited());
  clock.Advance(absl::Seconds(61));
  REQUIRE_FALSE(core->RejoinAwaited());
}

// An async job (lease 10 s) of workers a and b; a pushed once, then kept its lease with
// heartbeats (every 5 s at most) for `seconds` while b was silent (cut off: its lease ran
// out at 10 s), then finished: the job is over. *awaited_before: whether the server awaited a
// rejoin just before a finished.
std::unique_ptr<ParameterServerCore> FinishedWithoutB(FakeClock* clock, int seconds, bool* awaited_before) {
  ServerOptions o = FakeTimed(Mode::kAsync, 1, clock);
  o.lease = absl::Seconds(10);
  o.round_timeout = absl::Seconds(5);
  auto core = *ParameterServerCore::Create(o);
  const JoinResult a = *core->Join(Info("a", true), clock->Now() + absl::Seconds(1));
  REQUIRE(core->Join(Info("b", false), clock->Now() + absl::Seconds(1)).ok());
  REQUIRE(core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon()).ok());
  for (int t = 0; t < seconds;) {
    const int step = std::min(5, seconds - t);
    clock->Advance(absl::Seconds(step));
    t += step;
    REQUIRE(core->Heartbeat(a.id) == Action::kContinue);
  }
  *awaited_before = core->RejoinAwaited();
  REQUIRE(core->Leave(a.id, /*finished=*/true).ok());
  REQUIRE(core->Snapshot().job_finished);
  return core;
}

TEST_CASE("a worker cut off until after the job finished is awaited after it, until told the job is over",
          "[core][clock][job]") {
  FakeClock clock;
  bool awaited_before = true;
  // 26 s: past b's expiry and a lease, it was awaited no longer while the job ran.
  auto core = FinishedWithoutB(&clock, 26, &awaited_before);
  REQUIRE_FALSE(awaited_before);
  // The job is over without b, whose link may heal only now: awaited for kCutOffNotice.
  REQUIRE(core->RejoinAwaited());
  clock.Advance(ParameterServerCore::kCutOffNotice - absl::Seconds(1));
  REQUIRE(core->RejoinAwaited());
  const JoinResult late = *core->Join(Info("b", false), clock.Now() + absl::Seconds(1));
  REQUIRE(late.job_finished);
  REQUIRE_FALSE(core->RejoinAwaited());  // told: nobody else to wait for
}

TEST_CASE("a worker cut off and never back holds a finished job's server for kCutOffNotice at most",
          "[core][clock][job]") {
  FakeClock clock;
  bool awaited_before = false;
  auto core = FinishedWithoutB(&clock, 11, &awaited_before);  // b expired at 11 s, the job ends
  REQUIRE(awaited_before);
  clock.Advance(ParameterServerCore::kCutOffNotice - absl::Seconds(1));
  REQUIRE(core->RejoinAwaited());
  clock.Advance(absl::Seconds(1));
  REQUIRE_FALSE(core->RejoinAwaited());
}

// Two sync workers w0 and w1 joined under `o`, and the job went back to its first
// checkpoint: every session ended, the workers of that moment awaited.
std::unique_ptr<ParameterServerCore> RolledBackPair(const ServerOptions& o) {
  auto core = *ParameterServerCore::Create(o);
  (void)JoinAll(*core, 2);
  const CheckpointState at0 = *core->Capture(ParameterServerCore::CaptureFor::kCheckpoint);
  REQUIRE(core->RollBack(at0).ok());
  return core;
}

// w0 joins `core` and waits for w1 until training starts without it (`wait_for_w1` later),
// then finishes: the job is over. w1, cut off until now, is awaited up to kCutOffNotice,
// and told the job is over when it comes.
void W0FinishesAloneW1IsAwaited(ParameterServerCore& core, FakeClock* clock, absl::Duration wait_for_w1) {
  JoinResult a;
  std::thread ja([&] { a = *core.Join(Info("w0", false), absl::InfiniteFuture()); });
  AwaitState([&] { return clock->waiters() > 0; });
  clock->Advance(wait_for_w1);
  ja.join();
  REQUIRE(core.Leave(a.id, /*finished=*/true).ok());
  REQUIRE(core.Snapshot().job_finished);
  REQUIRE(core.RejoinAwaited());
  clock->Advance(ParameterServerCore::kCutOffNotice - absl::Seconds(1));
  REQUIRE(core.RejoinAwaited());
  REQUIRE(core.Join(Info("w1", false), clock->Now() + absl::Seconds(1))->job_finished);
  REQUIRE_FALSE(core.RejoinAwaited());
}

TEST_CASE("a worker whose session a rollback ended, back after the job finished without it, is awaited and told",
          "[core][clock][rollback][job]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kSync, 2, &clock);
  o.lease = absl::Seconds(10);
  o.round_timeout = absl::Seconds(5);
  auto core = RolledBackPair(o);
  // w0 joins again; w1, its push held by a cut link, learns of the rollback only when the
  // link heals: training goes on without it after a lease, and the job ends.
  W0FinishesAloneW1IsAwaited(*core, &clock, o.lease);
}

TEST_CASE("a worker live at the checkpoint a restarted server restored, never back, is awaited after the finish",
          "[core][clock][restore][job]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kAsync, 2, &clock);
  o.start_timeout = absl::Seconds(20);
  const CheckpointState at0 = *RolledBackPair(o)->Capture(ParameterServerCore::CaptureFor::kCheckpoint);
  // The server restarts from it; w1 is cut off through the restart: w0 trains alone from
  // the start timeout on, and finishes.
  auto restarted = *ParameterServerCore::Create(o);
  REQUIRE(restarted->Restore(at0).ok());
  W0FinishesAloneW1IsAwaited(*restarted, &clock, o.start_timeout);
}

// Two sync workers, the omnilearn controller on a global batch of 30, adjusting every `every` rounds.
ServerOptions TwoPlanned(int every) {
  ServerOptions o = Options(Mode::kSync, 2);
  o.controller.global_batch = 30;
  o.controller.policy = controller::Policy::kOmniLearn;
  o.adjust_every = every;
  return o;
}

// Joins "a" (with the model) and "b": both wait for the start. `local`: they take local steps.
std::pair<JoinResult, JoinResult> JoinTwo(ParameterServerCore& core, bool local = false) {
  JoinResult a, b;
  JoinInfo info_a = Info("a", true), info_b = Info("b", false);
  info_a.takes_local_steps = info_b.takes_local_steps = local;
  std::thread joiner([&] { a = *core.Join(info_a, Soon()); });
  AwaitState([&] { return core.Snapshot().parameter_count > 0; });
  b = *core.Join(info_b, Soon());
  joiner.join();
  return {a, b};
}

TEST_CASE("the first plan comes after two rounds, the later ones every adjust_every", "[core][controller]") {
  auto core = *ParameterServerCore::Create(TwoPlanned(10));
  JoinResult a, b;
  std::tie(a, b) = JoinTwo(*core);
  auto round = [&] {
    const uint64_t version = core->Snapshot().version;
    std::thread first(
        [&] { REQUIRE(core->Push(Grad(a.id, 15, version), std::vector<float>(kParams, 0.0f), Soon()).ok()); });
    AwaitState([&] {
      return core->Snapshot().pushes_by_result.count("applied") > 0 &&
             core->Snapshot().pushes_by_result.at("applied") % 2 == 1;
    });
    REQUIRE(core->Push(Grad(b.id, 15, version), std::vector<float>(kParams, 0.0f), Soon()).ok());
    first.join();
  };
  round();
  REQUIRE(core->Snapshot().adjustments == 0);
  round();
  REQUIRE(core->Snapshot().adjustments == 1);  // two measured iterations of every worker
  for (int i = 0; i < 9; ++i) round();
  REQUIRE(core->Snapshot().adjustments == 1);
  round();
  REQUIRE(core->Snapshot().adjustments == 2);  // then every 10 rounds
}

// One sync round of workers a and b at their planned batches, a sample taking `a_seconds` on
// a's device and `b_seconds` on b's; b's emulated device has overrun `b_overruns` steps so far.
void TimedRound(ParameterServerCore& core, WorkerId a, WorkerId b, double a_seconds, double b_seconds,
                uint64_t b_overruns) {
  const ServerSnapshot s = core.Snapshot();
  PushInfo pa = Grad(a, WorkerOf(s, a).batch, s.version);
  pa.compute_seconds = a_seconds * static_cast<double>(pa.batch);
  PushInfo pb = Grad(b, WorkerOf(s, b).batch, s.version);
  pb.compute_seconds = b_seconds * static_cast<double>(pb.batch);
  pb.emulation_overruns = b_overruns;
  std::thread first([&] { REQUIRE(core.Push(pa, std::vector<float>(kParams, 0.0f), Soon()).ok()); });
  AwaitState([&] { return AppliedPushes(core) % 2 == 1; });
  REQUIRE(core.Push(pb, std::vector<float>(kParams, 0.0f), Soon()).ok());
  first.join();
}

// Two identical devices; b's host is loaded (a server beside it takes the cores), so its
// real compute overruns its emulated time 3x. The overrun steps do not move the plan;
// the same times without the overrun flag do (the contrast).
TEST_CASE("steps whose emulated device overran do not move the plan", "[core][controller]") {
  for (const bool flagged : {true, false}) {
    CAPTURE(flagged);
    auto core = *ParameterServerCore::Create(TwoPlanned(2));
    JoinResult a, b;
    std::tie(a, b) = JoinTwo(*core);
    uint64_t overruns = 0;
    for (int r = 0; r < 12; ++r) {
      const bool loaded = r >= 4;  // the load comes once the plan has settled
      if (loaded && flagged) ++overruns;
      TimedRound(*core, a.id, b.id, 0.01, loaded ? 0.03 : 0.01, overruns);
    }
    const ServerSnapshot s = core->Snapshot();
    if (flagged) {
      CHECK(WorkerOf(s, a.id).batch == 15);
      CHECK(WorkerOf(s, b.id).batch == 15);
      CHECK(core->registry().Serialize().find("omnilearn_controller_steps_set_aside_total{reason=\"overran\"} 8\n") !=
            std::string::npos);
    } else {
      CHECK(WorkerOf(s, b.id).batch < 10);  // 3x slower: about a quarter of the global batch
    }
  }
}

// Two workers taking 8 local steps a round, b's device 3x slower than a's. A round is many
// steps: the first plan comes after one round, and one every round after it. A round with
// one step of 8 overrun is still the device's and moves the plan (b's batch falls); three
// of 8 make it the host's, and b, never measured, stays at an equal share.
TEST_CASE("local steps: a plan every round, the first after one; a round is the host's from a quarter overrun",
          "[core][controller]") {
  for (const uint64_t overran_steps : {uint64_t{1}, uint64_t{3}}) {
    CAPTURE(overran_steps);
    ServerOptions o = TwoPlanned(10);
    o.local_steps = 8;
    auto core = *ParameterServerCore::Create(o);
    JoinResult a, b;
    std::tie(a, b) = JoinTwo(*core, /*local=*/true);
    for (uint64_t r = 0; r < 3; ++r) {
      TimedRound(*core, a.id, b.id, 0.01, 0.03, overran_steps * (r + 1));
      REQUIRE(core->Snapshot().adjustments == r + 1);
    }
    const int64_t batch_b = WorkerOf(core->Snapshot(), b.id).batch;
    if (overran_steps == 1) {
      CHECK(batch_b < 10);  // 3x slower: about a quarter of the global batch
    } else {
      CHECK(batch_b == 15);
    }
  }
}

// Three sync workers of different speeds push exactly the samples they were assigned,
// while the controller moves their batches.
TEST_CASE("sync: every sample of an epoch is trained exactly once, whatever the batches", "[core][samples]") {
  ServerOptions o = Options(Mode::kSync, 3);
  o.controller.global_batch = 30;
  o.controller.policy = controller::Policy::kOmniLearn;
  o.adjust_every = 1;
  auto core = *ParameterServerCore::Create(o);
  std::vector<JoinResult> joined(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      if (i > 0) AwaitState([&] { return core->Snapshot().parameter_count > 0; });
      JoinInfo info = Info("w" + std::to_string(i), i == 0);
      info.dataset_size = 97;  // not a multiple of any batch: rounds straddle the epoch's end
      joined[i] = *core->Join(info, Soon());
    });
  }
  for (auto& t : threads) t.join();
  std::vector<SampleBatch> assigned;
  for (const JoinResult& j : joined) assigned.push_back(j.samples);
  std::map<uint64_t, std::multiset<uint64_t>> trained;
  const double speed[] = {1.0, 2.0, 4.0};  // seconds per sample differ: the controller moves batches
  for (int round = 0; round < 10; ++round) {
    const uint64_t version = core->Snapshot().version;
    std::vector<PushResult> replies(3);
    threads.clear();
    for (int i = 0; i < 3; ++i) {
      for (const SampleSpan& span : assigned[i]) trained[span.epoch].insert(span.ids.begin(), span.ids.end());
      threads.emplace_back([&, i] {
        const int64_t b = CountSamples(assigned[i]);
        PushInfo p = Grad(joined[i].id, b, version);
        p.compute_seconds = 0.001 * speed[i] * b;
        replies[i] = *core->Push(p, std::vector<float>(kParams, 0.0f), Soon());
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < 3; ++i) {
      REQUIRE(replies[i].applied);
      REQUIRE(CountSamples(replies[i].samples) == replies[i].next_batch);
      assigned[i] = replies[i].samples;
    }
  }
  REQUIRE(core->Snapshot().adjustments > 0);
  REQUIRE(core->Snapshot().dataset_size == 97);
  // 300 samples trained: epochs 0 to 2 complete, each id once; epoch 3 in part.
  for (uint64_t epoch : {0, 1, 2}) {
    REQUIRE(trained[epoch].size() == 97);
    REQUIRE(std::set<uint64_t>(trained[epoch].begin(), trained[epoch].end()).size() == 97);
  }
  REQUIRE(trained[3].size() == 300 - 3 * 97);
}

TEST_CASE("a worker dropped from a round comes back: readmitted with a fresh batch, never refused", "[core][samples]") {
  for (Mode mode : {Mode::kSync, Mode::kSsp}) {
    FakeClock clock;
    ServerOptions o = FakeTimed(mode, 2, &clock);
    o.round_timeout = absl::Seconds(8);
    o.staleness_bound = 0;
    o.controller.global_batch = 8;
    auto core = *ParameterServerCore::Create(o);
    JoinInfo ia = Info("a", true), ib = Info("b", false);
    ia.dataset_size = ib.dataset_size = 64;
    JoinResult a, b;
    std::thread ta([&] { a = *core->Join(ia, Soon()); });
    AwaitState([&] { return core->Snapshot().parameter_count > 0; });
    b = *core->Join(ib, Soon());
    ta.join();
    // b is paused (SIGSTOP) past the round timeout: a's round closes without it.
    PushResult ra;
    std::thread pa([&] { ra = *core->Push(Grad(a.id, a.batch, 0), std::vector<float>(kParams, 1.0f), Soon()); });
    AwaitState([&] { return AppliedPushes(*core) == 1 && clock.waiters() > 0; });
    clock.Advance(absl::Seconds(9));
    pa.join();
    REQUIRE(ra.applied);
    REQUIRE(StateOf(core->Snapshot(), b.id) == WorkerState::kDropped);
    // b wakes up and pushes the batch it was assigned before the drop.
    const std::vector<float> before = Weights(*core, a.id);
    absl::StatusOr<PushResult> back = core->Push(Grad(b.id, b.batch, 0), std::vector<float>(kParams, 9.0f), Soon());
    INFO(back.status().ToString());
    REQUIRE(back.ok());
    REQUIRE_FALSE(back->applied);
    REQUIRE(absl::StrContains(back->message, "readmitted"));
    REQUIRE(back->action == Action::kContinue);
    REQUIRE(CountSamples(back->samples) == back->next_batch);
    REQUIRE(back->next_batch > 0);
    REQUIRE(StateOf(core->Snapshot(), b.id) != WorkerState::kDropped);
    REQUIRE(Weights(*core, a.id) == before);  // its late gradient left out
  }
}

// A push of the samples the worker was assigned (their count is its batch).
PushInfo Trained(WorkerId id, const SampleBatch& samples, uint64_t version) {
  return Grad(id, CountSamples(samples), version);
}

PushInfo IdleOf(WorkerId id, uint64_t version) {
  PushInfo p;
  p.id = id;
  p.version = version;
  p.idle = true;
  return p;
}

TEST_CASE("sync: the job's sample count ends it exactly; an idle worker is in the round and gets what a lost one left",
          "[core][samples][clock]") {
  for (bool lose_x : {false, true}) {
    FakeClock clock;
    ServerOptions o = FakeTimed(Mode::kSync, 2, &clock);  // global batch 8: 4 and 4
    auto core = *ParameterServerCore::Create(o);
    JoinInfo ia = Info("a", true), ib = Info("b", false);
    ia.dataset_size = ib.dataset_size = 10;
    ia.job_samples = ib.job_samples = 20;  // two epochs
    JoinResult a, b;
    std::thread ta([&] { a = *core->Join(ia, clock.Now() + absl::Seconds(5)); });
    AwaitState([&] { return core->Snapshot().parameter_count > 0; });
    b = *core->Join(ib, clock.Now() + absl::Seconds(5));
    ta.join();
    SampleBatch sa = a.samples, sb = b.samples;
    bool idle_b = false;
    for (uint64_t version : {0, 1}) {  // 16 samples
      PushResult ra;
      std::thread pa([&] { ra = *core->Push(Trained(a.id, sa, version), std::vector<float>(kParams, 1.0f), Soon()); });
      const PushResult rb = *core->Push(Trained(b.id, sb, version), std::vector<float>(kParams, 1.0f), Soon());
      pa.join();
      sa = ra.samples;
      sb = rb.samples;
      REQUIRE_FALSE((ra.idle && rb.idle));
      idle_b = rb.idle;
    }
    // 4 samples are left, for x (whose reply was first); y has none and says so.
    const WorkerId x = idle_b ? a.id : b.id, y = idle_b ? b.id : a.id;
    const SampleBatch left = idle_b ? sa : sb;
    REQUIRE(CountSamples(left) == 4);
    REQUIRE((idle_b ? sb : sa).empty());
    absl::StatusOr<PushResult> idle;
    std::thread ty([&] { idle = core->Push(IdleOf(y, 2), {}, Soon()); });
    AwaitState([&] { return core->Snapshot().pushes_by_result.count("idle") == 1; });
    if (!lose_x) {
      const PushResult rx = *core->Push(Trained(x, left, 2), std::vector<float>(kParams, 1.0f), Soon());
      ty.join();
      REQUIRE(rx.applied);
      REQUIRE(rx.idle);
      REQUIRE(rx.samples.empty());
      REQUIRE(idle.ok());
      REQUIRE(idle->idle);
      REQUIRE_FALSE(idle->applied);
      REQUIRE(idle->global_samples == 20);
      REQUIRE(core->Snapshot().global_samples == 20);
      continue;
    }
    // x is lost (paused past the round's deadline): y is handed its samples and trains them alone.
    AwaitState([&] { return clock.waiters() > 0; });
    clock.Advance(absl::Seconds(11));
    ty.join();
    REQUIRE(idle.ok());
    REQUIRE_FALSE(idle->idle);
    REQUIRE(idle->samples == left);
    REQUIRE(StateOf(core->Snapshot(), x) == WorkerState::kDropped);
    const PushResult ry = *core->Push(Trained(y, idle->samples, 2), std::vector<float>(kParams, 1.0f), Soon());
    REQUIRE(ry.applied);
    REQUIRE(ry.idle);
    REQUIRE(core->Snapshot().global_samples == 20);
    // x comes back with the samples y trained: readmitted, left out, and idle.
    const PushResult late = *core->Push(Trained(x, left, 2), std::vector<float>(kParams, 1.0f), Soon());
    REQUIRE_FALSE(late.applied);
    REQUIRE(late.idle);
    REQUIRE(core->Snapshot().global_samples == 20);
  }
}

TEST_CASE("async: no sample past the job's count; an idle worker is answered once the model moves",
          "[core][samples][clock]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kAsync, 1, &clock);
  auto core = *ParameterServerCore::Create(o);
  JoinInfo ia = Info("a", true), ib = Info("b", false);
  ia.dataset_size = ib.dataset_size = 10;
  ia.job_samples = ib.job_samples = 25;
  const JoinResult a = *core->Join(ia, Soon());
  const JoinResult b = *core->Join(ib, Soon());
  std::map<WorkerId, SampleBatch> held = {{a.id, a.samples}, {b.id, b.samples}};
  uint64_t handed = CountSamples(a.samples) + CountSamples(b.samples);
  WorkerId idler = 0;
  for (int i = 0; i < 20 && idler == 0; ++i) {
    for (WorkerId id : {a.id, b.id}) {
      if (held[id].empty()) continue;
      const PushResult r =
          *core->Push(Trained(id, held[id], core->version()), std::vector<float>(kParams, 0.0f), Soon());
      REQUIRE(r.applied);
      held[id] = r.samples;
      handed += CountSamples(r.samples);
      if (r.idle) {
        idler = id;
        break;
      }
    }
  }
  REQUIRE(idler != 0);
  REQUIRE(handed == 25);
  const WorkerId other = idler == a.id ? b.id : a.id;
  REQUIRE_FALSE(held[other].empty());  // the last samples
  absl::StatusOr<PushResult> idle;
  std::thread t([&] { idle = core->Push(IdleOf(idler, core->version()), {}, Soon()); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.count("idle") == 1; });
  const PushResult last =
      *core->Push(Trained(other, held[other], core->version()), std::vector<float>(kParams, 0.0f), Soon());
  t.join();
  REQUIRE(last.idle);
  REQUIRE(idle.ok());
  REQUIRE(idle->idle);
  REQUIRE(idle->global_samples == 25);
  REQUIRE(core->Snapshot().global_samples == 25);
  // An idle push from a worker that holds samples is a worker's bug: refused.
  JoinInfo ic = Info("c", false);
  ic.dataset_size = 10;
  ic.job_samples = 30;
  REQUIRE(core->Join(ic, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("samples of a push that was not applied, or of a worker that left, are handed out again", "[core][samples]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kAsync, 1));
  JoinInfo ia = Info("a", true), ib = Info("b", false);
  ia.dataset_size = ib.dataset_size = 50;
  const JoinResult a = *core->Join(ia, Soon());
  const JoinResult b = *core->Join(ib, Soon());
  REQUIRE(CountSamples(a.samples) == 8);
  // A push claiming another batch than the one assigned is refused.
  REQUIRE(core->Push(Grad(a.id, 7, 0), std::vector<float>(kParams, 0.0f), Soon()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  // An out-of-memory report gives the samples back: they come first in the next batch.
  PushInfo oom = Grad(a.id, 8, 0);
  oom.out_of_memory = true;
  const PushResult r = *core->Push(oom, {}, Soon());
  REQUIRE_FALSE(r.applied);
  std::vector<uint64_t> next;
  for (const SampleSpan& span : r.samples) next.insert(next.end(), span.ids.begin(), span.ids.end());
  REQUIRE(next.size() == static_cast<size_t>(r.next_batch));
  REQUIRE(std::equal(next.begin(), next.end(), a.samples[0].ids.begin()));
  // A worker that leaves returns what it held.
  REQUIRE(core->Leave(b.id).ok());
  JoinInfo ic = Info("c", false);
  ic.dataset_size = 50;
  const JoinResult c = *core->Join(ic, Soon());
  REQUIRE(c.samples[0].ids[0] == b.samples[0].ids[0]);
  // Another data set size does not join the job.
  JoinInfo id = Info("d", false);
  id.dataset_size = 60;
  REQUIRE(core->Join(id, Soon()).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("buffers are the batch-weighted mean of the round's values, never optimized", "[core][buffers]") {
  ServerOptions o = Options(Mode::kSync, 2);
  o.controller.global_batch = 40;
  auto core = *ParameterServerCore::Create(o);
  auto with_buffer = [](const std::string& name, bool params) {
    JoinInfo j = Info(name, params);
    j.layout = *ModelLayout::Create({{"w", {2, 2}}, {"bn.running_var", {2}, true}});
    return j;
  };
  JoinResult a, b;
  JoinInfo ia = with_buffer("a", true);
  ia.max_batch = 10;  // a's ceiling: the plan gives a 10 and b 30 of the 40
  std::thread ta([&] { a = *core->Join(ia, Soon()); });
  AwaitState([&] { return core->Snapshot().parameter_count > 0; });
  b = *core->Join(with_buffer("b", false), Soon());
  ta.join();
  REQUIRE((a.batch == 10 && b.batch == 30));
  PushInfo pa = Grad(a.id, 10, 0), pb = Grad(b.id, 30, 0);
  std::thread push_a([&] { REQUIRE(core->Push(pa, {1, 1, 1, 1, 1, 2}, Soon()).ok()); });
  REQUIRE(core->Push(pb, {1, 1, 1, 1, 5, 6}, Soon()).ok());
  push_a.join();
  const std::vector<float> w = Weights(*core, a.id);
  REQUIRE(w[0] == Approx(-1.0));                      // parameters: w -= lr * mean gradient
  REQUIRE(w[4] == Approx((10 * 1 + 30 * 5) / 40.0));  // buffers: the weighted mean of the values
  REQUIRE(w[5] == Approx((10 * 2 + 30 * 6) / 40.0));
}

TEST_CASE("the job finishes when every worker left and one finished; then joins are told so, or reset", "[core][job]") {
  std::vector<std::string> events;
  ServerOptions o = Options(Mode::kAsync, 1);
  o.log = [&](const std::string& line) { events.push_back(line); };
  auto core = *ParameterServerCore::Create(o);
  const JoinResult a = *core->Join(Info("a", true), Soon());
  const JoinResult b = *core->Join(Info("b", false), Soon());
  REQUIRE(core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon()).ok());
  REQUIRE(core->Leave(a.id, /*finished=*/true).ok());
  REQUIRE_FALSE(core->Snapshot().job_finished);  // b still trains
  REQUIRE(core->Leave(b.id).ok());
  REQUIRE(core->Snapshot().job_finished);
  // A worker that comes now (one restarted after the end) is told the job is complete.
  const JoinResult late = *core->Join(Info("c", true), Soon());
  REQUIRE(late.action == Action::kStop);
  REQUIRE(late.job_finished);
  REQUIRE(late.global_samples == 4);
  REQUIRE(late.version == 1);
  REQUIRE(core->Snapshot().workers.size() == 2);  // c never joined
  auto joined = [&](const std::string& what) {
    return std::any_of(events.begin(), events.end(), [&](const std::string& e) { return absl::StrContains(e, what); });
  };
  REQUIRE(joined("worker a joined"));
  REQUIRE(joined("worker a left (finished its training)"));
  REQUIRE(joined("worker b left (interrupted)"));
  REQUIRE(joined("training finished"));

  o.reset_when_done = true;
  auto daemon = *ParameterServerCore::Create(o);
  const JoinResult first = *daemon->Join(Info("a", true), Soon());
  REQUIRE(daemon->Push(Grad(first.id, 8, 0), std::vector<float>(kParams, 1.0f), Soon()).ok());
  REQUIRE(daemon->Leave(first.id, true).ok());
  JoinInfo other = Info("a", true);  // a new job, with another model
  other.layout = *ModelLayout::Create({{"v", {3}}});
  other.initial_parameters = std::vector<float>(3, 0.0f);
  const JoinResult next = *daemon->Join(other, Soon());
  const ServerSnapshot s = daemon->Snapshot();
  REQUIRE(s.job == 2);
  REQUIRE(s.version == 0);
  REQUIRE(s.global_samples == 0);
  REQUIRE(s.parameter_count == 3);
  REQUIRE(next.batch == 8);
}

TEST_CASE("a worker restarted late is awaited by a finished job, and told the job is over even at shutdown",
          "[core][job]") {
  FakeClock clock;
  ServerOptions o = Options(Mode::kAsync, 1);
  o.clock = &clock;
  auto core = *ParameterServerCore::Create(o);
  const JoinResult a = *core->Join(Info("a", true), Soon());
  const JoinResult b = *core->Join(Info("b", false), Soon());
  REQUIRE(core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon()).ok());
  REQUIRE(core->Leave(a.id, /*finished=*/true).ok());
  REQUIRE_FALSE(core->RejoinAwaited());
  // b's process was killed and restarted: its name is still its old session's.
  REQUIRE(absl::IsAlreadyExists(core->Join(Info("b", false), Soon()).status()));
  REQUIRE(core->Leave(b.id).ok());  // the old session ends (its lease, here a leave)
  REQUIRE(core->Snapshot().job_finished);
  REQUIRE(core->RejoinAwaited());  // its next try comes within 2 s: the server waits
  clock.Advance(absl::Seconds(3));
  REQUIRE_FALSE(core->RejoinAwaited());
  core->Shutdown();
  const JoinResult late = *core->Join(Info("b", false), Soon());
  REQUIRE(late.action == Action::kStop);
  REQUIRE(late.job_finished);  // not a bare stop: the worker exits 0, saying the job is over
}

TEST_CASE("shutdown: joins, pushes and heartbeats are told to stop; the server waits for the workers to leave",
          "[core][job]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kAsync, 1));
  const JoinResult a = *core->Join(Info("a", true), Soon());
  const JoinResult b = *core->Join(Info("b", false), Soon());
  core->Shutdown();
  REQUIRE(core->Join(Info("c", false), Soon())->action == Action::kStop);
  REQUIRE_FALSE(core->AwaitWorkersStopped(absl::Now()));
  REQUIRE(core->Heartbeat(a.id) == Action::kStop);
  REQUIRE(core->Push(Grad(b.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon())->action == Action::kStop);
  REQUIRE(core->Leave(a.id).ok());
  REQUIRE_FALSE(core->AwaitWorkersStopped(absl::Now()));  // b was told, has not left yet
  REQUIRE(core->Leave(b.id).ok());
  REQUIRE(core->AwaitWorkersStopped(absl::Now()));
}

TEST_CASE("a worker told to stop at the start barrier counts as gone", "[core][job]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  JoinResult waiting;
  std::thread t([&] { waiting = *core->Join(Info("a", true), Soon()); });
  // It waits at the barrier for the second worker, which never comes.
  AwaitState([&] { return core->Snapshot().workers.size() == 1; });
  core->Shutdown();
  t.join();
  REQUIRE(waiting.action == Action::kStop);
  REQUIRE(core->AwaitWorkersStopped(absl::Now()));  // no session to leave with: not waited for
}

TEST_CASE("a join without a data set size into a job that assigns samples is refused, saying what to pass", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kAsync, 1));
  JoinInfo first = Info("a", true);
  first.dataset_size = 1347;
  REQUIRE(core->Join(first, Soon()).ok());
  absl::StatusOr<JoinResult> r = core->Join(Info("b", false), Soon());
  REQUIRE(absl::IsInvalidArgument(r.status()));
  CAPTURE(r.status().message());
  REQUIRE(absl::StrContains(r.status().message(), "dataset_size=1347"));
}

TEST_CASE("an out-of-memory report lowers the batch and does not stall the round", "[core]") {
  ServerOptions o = Options(Mode::kSync, 2);
  o.controller.policy = controller::Policy::kOmniLearn;
  o.controller.global_batch = 100;
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinAll(*core, 2);
  const JoinResult &a = joined[0], &b = joined[1];
  PushResult ra;
  std::thread ta([&] { ra = *core->Push(Grad(a.id, 50, 0), std::vector<float>(kParams, 1.0f), Soon()); });
  PushInfo oom = Grad(b.id, 50, 0);
  oom.out_of_memory = true;
  PushResult rb = *core->Push(oom, {}, Soon());
  ta.join();
  REQUIRE_FALSE(rb.applied);
  REQUIRE(rb.next_batch < 50);
  REQUIRE(ra.version == 1);
  REQUIRE(ra.next_batch + WorkerOf(core->Snapshot(), b.id).batch == 100);
}

TEST_CASE("shutdown wakes a waiting push", "[core]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  const auto joined = JoinAll(*core, 2);
  const JoinResult &a = joined[0], &b = joined[1];
  absl::StatusOr<PushResult> r;
  std::thread ta([&] { r = core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon()); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.count("applied") == 1; });  // a waits in the round
  core->Shutdown();
  ta.join();
  REQUIRE(r.ok());
  REQUIRE(r->action == Action::kStop);
  // Later pushes are told to stop (workers exit 0) and change nothing.
  absl::StatusOr<PushResult> late = core->Push(Grad(b.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon());
  REQUIRE(late.ok());
  REQUIRE(late->action == Action::kStop);
  REQUIRE_FALSE(late->applied);
}

TEST_CASE("after a rollback training waits for the workers of that moment for a lease, not a round's timeout",
          "[core][rollback]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kSync, 2, &clock);
  o.round_timeout = absl::Seconds(5);
  o.lease = absl::Seconds(60);
  absl::Mutex mu;
  std::vector<std::string> lines;
  o.log = [&](const std::string& line) {
    absl::MutexLock lock(&mu);
    lines.push_back(line);
  };
  auto core = RolledBackPair(o);
  // a comes back first and waits for b: for a lease (a slow rejoin: backoff, a shard's
  // return), not the round's 5 s after which it would train alone.
  JoinResult a2, b2;
  std::thread ja([&] { a2 = *core->Join(Info("a", false), absl::InfiniteFuture()); });
  AwaitState([&] { return clock.waiters() > 0; });
  {
    absl::MutexLock lock(&mu);
    REQUIRE(std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
      return absl::StrContains(line, "waiting for 1 of 2 workers to join (training starts without them in 60 s)");
    }));
  }
  b2 = *core->Join(Info("b", false), absl::InfiniteFuture());
  ja.join();
  REQUIRE(a2.batch == 4);
  REQUIRE(b2.batch == 4);
}

TEST_CASE(
    "--shard_steps_ahead: each round's members and rate go out as the round before closes, and its step is "
    "the one decided",
    "[core][shards]") {
  ServerOptions o = Options(Mode::kSync, 2);
  std::vector<ReplicatedStep> steps;
  std::vector<RoundAhead> rounds;
  o.replication.step = [&](const ReplicatedStep& step) { steps.push_back(step); };
  o.replication.round_ahead = [&](const RoundAhead& round) { rounds.push_back(round); };
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinAll(*core, 2);
  const JoinResult &a = joined[0], &b = joined[1];
  auto round = [&] {
    const uint64_t v = core->Snapshot().version;
    std::thread ta([&] { REQUIRE(core->Push(Grad(a.id, 4, v), std::vector<float>(kParams, 1), Soon()).ok()); });
    REQUIRE(core->Push(Grad(b.id, 4, v), std::vector<float>(kParams, 1), Soon()).ok());
    ta.join();
  };
  round();
  REQUIRE(rounds.size() == 1);
  REQUIRE(rounds[0].version == 1);
  REQUIRE(rounds[0].members == std::vector<WorkerId>{a.id, b.id});
  REQUIRE(rounds[0].learning_rate == o.optimizer.learning_rate);
  REQUIRE(rounds[0].weigh_by_batch);
  round();
  REQUIRE(steps.size() == 2);
  // The step a shard takes ahead from the round and its pushes' batches is the coordinator's.
  ReplicatedStep ahead;
  ahead.version = 1;
  ahead.members = {{b.id, 1, 4}, {a.id, 1, 4}};
  ahead.settings.learning_rate = rounds[0].learning_rate;
  ahead.settings.update_scale = MeanScale(ahead.members);
  REQUIRE(SameStep(ahead, steps[1]));

  // A clipped job's step needs the slices' norm, which comes with the round: none ahead.
  o.optimizer.clip_grad_norm = 1;
  o.replication.norm = [](uint64_t, double sum_squares) { return sum_squares; };
  rounds.clear();
  auto clipped = *ParameterServerCore::Create(o);
  const auto two = JoinAll(*clipped, 2);
  std::thread ta([&] { REQUIRE(clipped->Push(Grad(two[0].id, 4, 0), std::vector<float>(kParams, 1), Soon()).ok()); });
  REQUIRE(clipped->Push(Grad(two[1].id, 4, 0), std::vector<float>(kParams, 1), Soon()).ok());
  ta.join();
  REQUIRE(clipped->Snapshot().version == 1);
  REQUIRE(rounds.empty());
}

TEST_CASE("a rollback takes the job back to a checkpoint: model, epoch position, sessions", "[core][rollback]") {
  ServerOptions o = Options(Mode::kSync, 2);
  std::vector<uint64_t> told;  // the versions the shards were told to checkpoint at
  uint64_t told_history = 0;   // and the step history there
  o.replication.checkpoint = [&](uint64_t v, uint64_t history) {
    told.push_back(v);
    told_history = history;
  };
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinAll(*core, 2);
  const JoinResult &a = joined[0], &b = joined[1];
  auto round = [&](float g) {
    const uint64_t v = core->Snapshot().version;
    std::thread ta([&] { REQUIRE(core->Push(Grad(a.id, 4, v), std::vector<float>(kParams, g), Soon()).ok()); });
    REQUIRE(core->Push(Grad(b.id, 4, v), std::vector<float>(kParams, g), Soon()).ok());
    ta.join();
  };
  round(1.0f);
  REQUIRE(core->Capture()->version == 1);  // a read (the export) tells the shards nothing
  REQUIRE(told.empty());
  const CheckpointState at1 = *core->Capture(ParameterServerCore::CaptureFor::kCheckpoint);
  REQUIRE(told == std::vector<uint64_t>{1});
  REQUIRE(at1.version == 1);
  REQUIRE(at1.history == ExtendHistory(0, 0, {{a.id, 0, 4}, {b.id, 0, 4}}));  // the round's members, by batch
  REQUIRE(told_history == at1.history);
  round(2.0f);
  REQUIRE(Weights(*core, a.id)[0] == -3.0f);
  // b waits in the third round when the rollback comes: it wakes and is told to join again.
  absl::StatusOr<PushResult> waiting;
  std::thread tb([&] { waiting = core->Push(Grad(b.id, 4, 2), std::vector<float>(kParams, 1.0f), Soon()); });
  AwaitState([&] { return AppliedPushes(*core) == 5; });
  const absl::Status rolled = core->RollBack(at1);
  INFO(rolled.ToString());
  REQUIRE(rolled.ok());
  tb.join();
  REQUIRE(absl::IsNotFound(waiting.status()));
  REQUIRE(absl::StrContains(waiting.status().message(), "version 1"));
  const ServerSnapshot s = core->Snapshot();
  REQUIRE(s.version == 1);
  REQUIRE(s.global_samples == at1.global_samples);
  REQUIRE(s.rounds == at1.rounds);
  REQUIRE(absl::IsNotFound(core->Push(Grad(a.id, 4, 1), std::vector<float>(kParams, 1.0f), Soon()).status()));
  REQUIRE(core->Heartbeat(a.id) == Action::kRejoin);
  // They join again under their names, and train on from the checkpoint's model once
  // both are back: the first waits for the second.
  JoinInfo ra = Info("a", false), rb = Info("b", false);
  JoinResult a2, b2;
  std::atomic<bool> a_back{false};
  std::thread ja([&] {
    a2 = *core->Join(ra, Soon());
    a_back = true;
  });
  AwaitState([&] {  // a is in the barrier...
    const ServerSnapshot s = core->Snapshot();
    return std::any_of(s.workers.begin(), s.workers.end(),
                       [&](const WorkerSnapshot& w) { return w.name == "a" && w.id != a.id; });
  });
  REQUIRE_FALSE(a_back);  // ...and stays there
  b2 = *core->Join(rb, Soon());
  ja.join();
  REQUIRE(a2.batch == 4);
  REQUIRE(b2.batch == 4);
  REQUIRE(Weights(*core, a2.id)[0] == -1.0f);
  std::thread ta([&] { REQUIRE(core->Push(Grad(a2.id, 4, 1), std::vector<float>(kParams, 1.0f), Soon())->applied); });
  REQUIRE(core->Push(Grad(b2.id, 4, 1), std::vector<float>(kParams, 1.0f), Soon())->applied);
  ta.join();
  REQUIRE(Weights(*core, a2.id)[0] == -2.0f);
  // Another model's or mode's checkpoint is refused.
  CheckpointState other = at1;
  other.mode = "async";
  REQUIRE(absl::IsFailedPrecondition(core->RollBack(other)));
  other = at1;
  other.layout = *ModelLayout::Create({{"w", {6}}});
  REQUIRE(absl::IsFailedPrecondition(core->RollBack(other)));
}

TEST_CASE("a restarted coordinator's rollback, before anyone joined, keeps the start barrier", "[core][rollback]") {
  auto first = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  const auto joined = JoinAll(*first, 2);
  auto round = [&](float g) {
    const uint64_t v = first->Snapshot().version;
    std::thread ta(
        [&] { REQUIRE(first->Push(Grad(joined[0].id, 4, v), std::vector<float>(kParams, g), Soon()).ok()); });
    REQUIRE(first->Push(Grad(joined[1].id, 4, v), std::vector<float>(kParams, g), Soon()).ok());
    ta.join();
  };
  round(1.0f);
  const CheckpointState at1 = *first->Capture();
  round(1.0f);
  const CheckpointState at2 = *first->Capture();
  // The restarted coordinator: its own newest checkpoint, then the one its shards hold too.
  auto core = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  REQUIRE(core->Restore(at2).ok());
  REQUIRE(core->RollBack(at1).ok());
  REQUIRE(core->Snapshot().version == 1);
  std::atomic<bool> a_back{false};
  JoinResult a;
  std::thread ja([&] {
    a = *core->Join(Info("w0", false), Soon());
    a_back = true;
  });
  AwaitState([&] { return core->Snapshot().workers.size() == 1; });  // w0 is in the barrier...
  REQUIRE_FALSE(a_back);  // ...waiting for the job's two workers, not training alone
  const JoinResult b = *core->Join(Info("w1", false), Soon());
  ja.join();
  REQUIRE(a.batch == 4);
  REQUIRE(b.batch == 4);
  REQUIRE(Weights(*core, a.id)[0] == -1.0f);
}

PushInfo Current(ParameterServerCore& core, WorkerId id, int64_t batch) {
  return Grad(id, batch, core.Snapshot().version);
}

TEST_CASE("ssp: a worker runs at most S iterations ahead of the slowest, then waits", "[core][ssp]") {
  ServerOptions o = Options(Mode::kSsp, 2);
  o.staleness_bound = 1;
  auto core = *ParameterServerCore::Create(o);
  const auto j = JoinAll(*core, 2);
  const std::vector<float> g(kParams, 1.0f);
  // Clock 1 vs 0: within the bound, applied and answered at once.
  PushResult r = *core->Push(Current(*core, j[0].id, 4), g, Soon());
  REQUIRE(r.applied);
  REQUIRE(r.version == 1);
  // Clock 2 vs 0: applied, but the reply waits for the slow worker.
  std::atomic<bool> answered{false};
  std::thread fast([&] {
    r = *core->Push(Current(*core, j[0].id, 4), g, Soon());
    answered = true;
  });
  AwaitState([&] { return core->Snapshot().version == 2; });  // applied on arrival all the same...
  REQUIRE_FALSE(answered);                                    // ...and its reply waits
  PushResult slow = *core->Push(Grad(j[1].id, 4, 0), g, Soon());
  fast.join();
  REQUIRE(answered);
  REQUIRE(slow.staleness == 2);
  REQUIRE(core->Snapshot().version == 3);
  // Each push moves the weights by lr * b/B * g = 0.5; the slow one, 2 versions behind,
  // is damped by n / (1 + s) = 2/3.
  const float w = Weights(*core, j[0].id)[0];
  REQUIRE(std::fabs(w - (-0.5f - 0.5f - 0.5f * 2.0f / 3.0f)) < 1e-5f);
}

TEST_CASE("ssp with S=0 steps in lockstep like sync", "[core][ssp]") {
  ServerOptions o = Options(Mode::kSsp, 2);
  o.staleness_bound = 0;
  auto core = *ParameterServerCore::Create(o);
  const auto j = JoinAll(*core, 2);
  const std::vector<float> g(kParams, 1.0f);
  for (int iteration = 0; iteration < 3; ++iteration) {
    std::atomic<bool> answered{false};
    std::thread a([&] {
      (void)*core->Push(Current(*core, j[0].id, 4), g, Soon());
      answered = true;
    });
    AwaitState([&] { return core->Snapshot().version == static_cast<uint64_t>(2 * iteration + 1); });
    REQUIRE_FALSE(answered);  // applied, and waits for the other worker's push of this iteration
    (void)*core->Push(Current(*core, j[1].id, 4), g, Soon());
    a.join();
  }
  REQUIRE(core->Snapshot().version == 6);
}

TEST_CASE("ssp: a dead worker is dropped after the timeout, no deadlock", "[core][ssp][clock]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kSsp, 2, &clock);
  o.staleness_bound = 0;
  o.round_timeout = absl::Milliseconds(300);
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinTwoOnClock(*core, clock);
  const WorkerId a = joined.first.id, b = joined.second.id;
  const std::vector<float> g(kParams, 1.0f);
  const absl::Time deadline = clock.Now() + absl::Minutes(5);
  // a's push waits for b, which never comes: the timeout drops b.
  PushResult first;
  std::thread waits([&] { first = *core->Push(Current(*core, a, 4), g, deadline); });
  AwaitState([&] { return clock.waiters() > 0; });
  clock.Advance(o.round_timeout);
  waits.join();
  REQUIRE(StateOf(core->Snapshot(), b) == WorkerState::kDropped);
  // Alone now: the survivor goes on, with the whole global batch.
  REQUIRE(first.next_batch == 8);
  const PushResult r = *core->Push(Current(*core, a, first.next_batch), g, deadline);
  REQUIRE(r.next_batch == 8);
  // The dead one comes back with its stale push: left out, it is readmitted at the
  // survivor's clock, so nobody waits on its past.
  const PushResult back = *core->Push(Grad(b, 4, 0), g, deadline);
  REQUIRE(StateOf(core->Snapshot(), b) == WorkerState::kActive);
  // a's next push waits for b's next one only (bound 0), and b's releases it: no drop.
  std::thread ahead([&] { (void)*core->Push(Current(*core, a, r.next_batch), g, deadline); });
  AwaitState([&] { return clock.waiters() > 0; });
  REQUIRE(core->Push(Current(*core, b, back.next_batch), g, deadline).ok());
  ahead.join();
  REQUIRE(StateOf(core->Snapshot(), a) == WorkerState::kActive);
  REQUIRE(StateOf(core->Snapshot(), b) == WorkerState::kActive);
}

TEST_CASE("the core's Prometheus series follow rounds, pushes and workers", "[core][metrics]") {
  auto core = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  const auto j = JoinAll(*core, 2);
  std::thread ta([&] { (void)*core->Push(Grad(j[0].id, 4, 0), std::vector<float>(kParams, 1.0f), Soon()); });
  (void)*core->Push(Grad(j[1].id, 4, 0), std::vector<float>(kParams, 1.0f), Soon());
  ta.join();
  (void)core->Push(Grad(j[1].id, 4, 1), std::vector<float>(kParams, NAN), Soon());
  core->CountPushBytes(96);
  const std::string text = core->registry().Serialize();
  for (const char* line :
       {"omnilearn_worker_batch_size{worker=\"w0\"} 4\n", "omnilearn_worker_batch_size{worker=\"w1\"} 4\n",
        "omnilearn_rounds_total 1\n", "omnilearn_model_version 1\n",
        "omnilearn_pushes_total{worker=\"w0\",result=\"applied\"} 1\n",
        "omnilearn_pushes_total{worker=\"w1\",result=\"invalid\"} 1\n", "omnilearn_workers{state=\"active\"} 2\n",
        "omnilearn_workers{state=\"dropped\"} 0\n", "omnilearn_round_wait_seconds_count 1\n",
        "omnilearn_push_bytes_total 96\n", "omnilearn_worker_compute_seconds_count{worker=\"w1\"} 1\n"}) {
    INFO(line);
    CHECK(text.find(line) != std::string::npos);
  }
  // A worker that leaves has no batch series any more.
  REQUIRE(core->Leave(j[0].id).ok());
  const std::string after = core->registry().Serialize();
  CHECK(after.find("omnilearn_worker_batch_size{worker=\"w0\"}") == std::string::npos);
  CHECK(after.find("omnilearn_worker_batch_size{worker=\"w1\"} 8\n") != std::string::npos);
  CHECK(after.find("omnilearn_workers{state=\"left\"} 1\n") != std::string::npos);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn

// ---------------------------------------------------------------- time, driven by a fake clock
namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a silent worker's lease expires on the clock, a heartbeat keeps it", "[core][clock]") {
  FakeClock clock;
  auto core = *ParameterServerCore::Create(FakeTimed(Mode::kAsync, 1, &clock));
  const JoinResult a = *core->Join(Info("a", true), clock.Now() + absl::Seconds(1));
  const JoinResult b = *core->Join(Info("b", false), clock.Now() + absl::Seconds(1));
  clock.Advance(absl::Seconds(50));
  REQUIRE(core->Heartbeat(b.id) == Action::kContinue);  // b: seen at t=50
  clock.Advance(absl::Seconds(11));                     // t=61: a silent for 61 s, b for 11 s
  REQUIRE(core->Heartbeat(b.id) == Action::kContinue);
  REQUIRE(core->Heartbeat(a.id) == Action::kRejoin);
  const ServerSnapshot s = core->Snapshot();
  REQUIRE(StateOf(s, a.id) == WorkerState::kLeft);
  REQUIRE(WorkerOf(s, a.id).expired);
  REQUIRE(StateOf(s, b.id) == WorkerState::kActive);
  REQUIRE_FALSE(WorkerOf(s, b.id).expired);
  REQUIRE(core->Push(Grad(a.id, 4, 0), std::vector<float>(6, 0.0f), clock.Now()).status().code() ==
          absl::StatusCode::kNotFound);
}

TEST_CASE("the start barrier gives up after start_timeout on the clock", "[core][clock]") {
  FakeClock clock;
  auto core = *ParameterServerCore::Create(FakeTimed(Mode::kSync, 3, &clock));
  absl::StatusOr<JoinResult> r;
  std::thread t([&] { r = core->Join(Info("a", true), clock.Now() + absl::Hours(1)); });
  AwaitState([&] { return core->Snapshot().workers.size() == 1; });  // a is in, waiting
  clock.Advance(absl::Minutes(4));
  // Still waiting: nothing to observe but that it has not returned; the deadline is
  // the clock's, so the next step alone lets it go.
  clock.Advance(absl::Minutes(1));
  t.join();
  REQUIRE(r.ok());
  REQUIRE(r->batch == 8);  // started with the one that came: the whole global batch
}

TEST_CASE("a worker waiting at the start barrier longer than its lease is not expired", "[core][clock]") {
  FakeClock clock;
  auto core = *ParameterServerCore::Create(FakeTimed(Mode::kSync, 2, &clock));
  absl::StatusOr<JoinResult> a;
  std::thread t([&] { a = core->Join(Info("a", true), clock.Now() + absl::Hours(1)); });
  AwaitState([&] { return core->Snapshot().workers.size() == 1; });
  clock.Advance(absl::Seconds(90));  // past the 60 s lease, within the 5 min start timeout
  const JoinResult b = *core->Join(Info("b", false), clock.Now() + absl::Seconds(1));
  t.join();
  REQUIRE(a.ok());
  const ServerSnapshot s = core->Snapshot();
  REQUIRE(StateOf(s, a->id) == WorkerState::kActive);
  REQUIRE(StateOf(s, b.id) == WorkerState::kActive);
  REQUIRE(a->batch == 4);  // the plan has both
  // Its lease runs from the start: still there 50 s later, gone 61 s later without a call.
  clock.Advance(absl::Seconds(50));
  REQUIRE(core->Heartbeat(b.id) == Action::kContinue);
  REQUIRE(StateOf(core->Snapshot(), a->id) == WorkerState::kActive);
  clock.Advance(absl::Seconds(11));
  REQUIRE(core->Heartbeat(b.id) == Action::kContinue);
  REQUIRE(StateOf(core->Snapshot(), a->id) == WorkerState::kLeft);
}

TEST_CASE("a sync round closes at its deadline on the clock and drops the late worker", "[core][clock]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kSync, 2, &clock);
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinTwoOnClock(*core, clock);
  const JoinResult &a = joined.first, &b = joined.second;
  absl::StatusOr<PushResult> r;
  std::thread pusher(
      [&] { r = core->Push(Grad(a.id, 4, 0), std::vector<float>(6, 1.0f), clock.Now() + absl::Minutes(5)); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.count("applied") == 1; });  // a waits in the round
  clock.Advance(absl::Seconds(9));
  REQUIRE(core->Snapshot().version == 0);  // not yet
  clock.Advance(absl::Seconds(1));
  pusher.join();
  REQUIRE(r.ok());
  REQUIRE(r->applied);
  REQUIRE(r->version == 1);
  REQUIRE(r->next_batch == 8);  // b's share moved to a
  REQUIRE(StateOf(core->Snapshot(), b.id) == WorkerState::kDropped);
}

TEST_CASE("a rollback ends a dropped worker's session too: its restarted process takes its name",
          "[core][clock][rollback]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kSync, 2, &clock);
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinTwoOnClock(*core, clock);
  const JoinResult &a = joined.first, &b = joined.second;
  const CheckpointState at0 = *core->Capture(ParameterServerCore::CaptureFor::kCheckpoint);
  std::thread pusher(
      [&] { REQUIRE(core->Push(Grad(a.id, 4, 0), std::vector<float>(6, 1.0f), clock.Now() + absl::Minutes(5)).ok()); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.count("applied") == 1; });
  clock.Advance(absl::Seconds(10));  // the round's deadline: b, killed, is dropped
  pusher.join();
  REQUIRE(StateOf(core->Snapshot(), b.id) == WorkerState::kDropped);
  // A shard came back: the job goes back to its checkpoint, and the start waits for a.
  REQUIRE(core->RollBack(at0).ok());
  // b's process restarted without its old session's secret: it joins by its name. Left
  // to its lease, the dropped session would hold the name for good, since leases only
  // run once training starts, and training waits for this join.
  absl::StatusOr<JoinResult> again = core->Join(Info("b", false), clock.Now() + absl::Seconds(30));
  REQUIRE(again.ok());
  REQUIRE(again->id != b.id);
  REQUIRE(StateOf(core->Snapshot(), again->id) == WorkerState::kActive);
}

// The value of the Prometheus sample `name` (with its labels) in the core's registry.
double Sample(ParameterServerCore& core, const std::string& name) {
  const std::string text = core.registry().Serialize();
  const size_t at = text.find("\n" + name + " ");
  REQUIRE(at != std::string::npos);
  return std::stod(text.substr(at + name.size() + 2));
}

TEST_CASE("a worker's link time is its reported communication less the longest server wait", "[core][clock][link]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kSync, 2, &clock);
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinTwoOnClock(*core, clock);
  const JoinResult &a = joined.first, &b = joined.second;
  // Round 1: a waits 30 ms in the barrier for b; b's push closes the round at once.
  absl::StatusOr<PushResult> ra;
  std::thread pusher(
      [&] { ra = core->Push(Grad(a.id, 4, 0), std::vector<float>(6, 1.0f), clock.Now() + absl::Minutes(5)); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.count("applied") == 1; });
  clock.Advance(absl::Milliseconds(30));
  REQUIRE(core->Push(Grad(b.id, 4, 0), std::vector<float>(6, 1.0f), clock.Now() + absl::Minutes(5)).ok());
  pusher.join();
  REQUIRE(ra.ok());
  // Round 2: each reports round 1's communication as it measured it: a 40 ms (30 of them
  // the server's wait; a shard held it 20), b 15 ms (none of it the server's, 12 a shard's).
  PushInfo pa = Grad(a.id, 4, 1), pb = Grad(b.id, 4, 1);
  pa.communication_seconds = 0.040;
  pa.shard_held_seconds = 0.020;
  pb.communication_seconds = 0.015;
  pb.shard_held_seconds = 0.012;
  std::thread second([&] { ra = core->Push(pa, std::vector<float>(6, 1.0f), clock.Now() + absl::Minutes(5)); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.at("applied") == 3; });
  REQUIRE(core->Push(pb, std::vector<float>(6, 1.0f), clock.Now() + absl::Minutes(5)).ok());
  second.join();
  REQUIRE(Sample(*core, "omnilearn_worker_link_seconds_sum{worker=\"a\"}") == Approx(0.010));
  REQUIRE(Sample(*core, "omnilearn_worker_link_seconds_sum{worker=\"b\"}") == Approx(0.003));
  // A communication time that cannot be real is refused.
  PushInfo bad = Grad(a.id, 4, 2);
  bad.communication_seconds = -1;
  REQUIRE(core->Push(bad, std::vector<float>(6, 1.0f), clock.Now() + absl::Minutes(5)).status().code() ==
          absl::StatusCode::kInvalidArgument);
  bad.communication_seconds = 0.01;
  bad.shard_held_seconds = std::nan("");
  REQUIRE(core->Push(bad, std::vector<float>(6, 1.0f), clock.Now() + absl::Minutes(5)).status().code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a push whose gradient is summed never fails: the call's deadline answers applied", "[core][clock]") {
  FakeClock clock;
  ServerOptions o = FakeTimed(Mode::kSync, 2, &clock);
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinTwoOnClock(*core, clock);
  const JoinResult &a = joined.first, &b = joined.second;
  absl::StatusOr<PushResult> r;
  // The call's deadline (2 s) comes before the round's (10 s).
  std::thread pusher(
      [&] { r = core->Push(Grad(a.id, 4, 0), std::vector<float>(6, 1.0f), clock.Now() + absl::Seconds(2)); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.count("applied") == 1; });
  clock.Advance(absl::Seconds(3));
  pusher.join();
  REQUIRE(r.ok());  // not DeadlineExceeded: the gradient is in the round
  REQUIRE(r->applied);
  REQUIRE(absl::StrContains(r->message, "the gradient is in it"));
  REQUIRE(core->Snapshot().version == 0);
  // b's push closes the round with both gradients: (4 * 1 + 4 * 3) / 8 = 2.
  REQUIRE(core->Push(Grad(b.id, 4, 0), std::vector<float>(6, 3.0f), clock.Now() + absl::Seconds(5))->version == 1);
  REQUIRE(Weights(*core, a.id) == std::vector<float>(6, -2.0f));
}

// Holds every sync push where it starts adding to the round (ServerOptions::
// before_accumulate) until Release: counts those inside.
class AccumulationGate {
 public:
  std::function<void(uint64_t)> Hook() {
    return [this](uint64_t) {
      absl::MutexLock lock(&mu_);
      ++inside_;
      mu_.AwaitWithTimeout(absl::Condition(&released_), absl::Seconds(20));
    };
  }
  int inside() {
    absl::MutexLock lock(&mu_);
    return inside_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
  }

 private:
  absl::Mutex mu_;
  int inside_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

TEST_CASE("sync pushes add to the round side by side, and the core answers meanwhile", "[core][parallel]") {
  AccumulationGate gate;
  ServerOptions o = Options(Mode::kSync, 2);
  o.before_accumulate = gate.Hook();
  auto core = *ParameterServerCore::Create(o);
  const auto joined = JoinAll(*core, 2);
  const JoinResult &a = joined[0], &b = joined[1];
  PushResult ra, rb;
  std::thread ta([&] { ra = *core->Push(Grad(a.id, 4, 0), std::vector<float>(kParams, 1.0f), Soon()); });
  std::thread tb([&] { rb = *core->Push(Grad(b.id, 4, 0), std::vector<float>(kParams, 5.0f), Soon()); });
  // Both pushes are adding at once: neither holds the core's lock while it sums...
  AwaitState([&] { return gate.inside() == 2; });
  // ...so status, heartbeats and pulls are answered meanwhile, and the round is still open.
  REQUIRE(core->Snapshot().version == 0);
  REQUIRE(core->Heartbeat(a.id) == Action::kContinue);
  REQUIRE(core->Pull(b.id, 0)->version == 0);
  gate.Release();
  ta.join();
  tb.join();
  REQUIRE(ra.version == 1);
  REQUIRE(rb.version == 1);
  REQUIRE(Weights(*core, a.id) == std::vector<float>(kParams, -3.0f));
}

TEST_CASE("a checkpoint mid-round counts what was trained; the round's samples are handed out again",
          "[core][parallel][samples]") {
  AccumulationGate gate;
  ServerOptions o = Options(Mode::kSync, 2);
  std::atomic<bool> hold{false};  // only b's push is held
  std::function<void(uint64_t)> held = gate.Hook();
  o.before_accumulate = [&](uint64_t) {
    if (hold) held(0);
  };
  auto join_two = [](ParameterServerCore& core) {
    JoinInfo ia = Info("a", true), ib = Info("b", false);
    ia.dataset_size = ib.dataset_size = 40;
    std::vector<JoinResult> j(2);
    std::thread ta([&] { j[0] = *core.Join(ia, Soon()); });
    AwaitState([&] { return core.Snapshot().parameter_count > 0; });
    j[1] = *core.Join(ib, Soon());
    ta.join();
    return j;
  };
  auto ids = [](const std::vector<JoinResult>& j) {
    std::set<uint64_t> out;
    for (const JoinResult& r : j) {
      for (const SampleSpan& span : r.samples) out.insert(span.ids.begin(), span.ids.end());
    }
    return out;
  };
  auto core = *ParameterServerCore::Create(o);
  const std::vector<JoinResult> j = join_two(*core);
  std::thread ta([&] { REQUIRE(core->Push(Grad(j[0].id, 4, 0), std::vector<float>(kParams, 1.0f), Soon())->applied); });
  AwaitState([&] { return AppliedPushes(*core) == 1; });  // a's push is summed and counted
  hold = true;
  std::thread tb([&] { REQUIRE(core->Push(Grad(j[1].id, 4, 0), std::vector<float>(kParams, 1.0f), Soon())->applied); });
  AwaitState([&] { return gate.inside() == 1; });  // b's is adding
  REQUIRE(core->Snapshot().global_samples == 4);
  const CheckpointState mid = *core->Capture();
  gate.Release();
  ta.join();
  tb.join();
  REQUIRE(core->Snapshot().global_samples == 8);
  // The checkpoint's model has neither push: it counts no sample, and a job resumed from
  // it trains both pushes' samples first.
  REQUIRE(mid.version == 0);
  REQUIRE(mid.global_samples == 0);
  auto resumed = *ParameterServerCore::Create(Options(Mode::kSync, 2));
  REQUIRE(resumed->Restore(mid).ok());
  REQUIRE(ids(join_two(*resumed)) == ids(j));
}

TEST_CASE("a round that times out waits for a push still adding, and keeps it", "[core][parallel][clock]") {
  FakeClock clock;
  AccumulationGate gate;
  ServerOptions o = FakeTimed(Mode::kSync, 3, &clock);
  o.controller.global_batch = 12;
  std::atomic<bool> hold{false};  // only a's push is held (b's goes through)
  std::function<void(uint64_t)> held = gate.Hook();
  o.before_accumulate = [&](uint64_t) {
    if (hold) held(0);
  };
  auto core = *ParameterServerCore::Create(o);
  std::vector<JoinResult> j(3);
  std::thread j0([&] { j[0] = *core->Join(Info("a", true), clock.Now() + absl::Seconds(5)); });
  AwaitState([&] { return core->Snapshot().parameter_count > 0; });
  std::thread j1([&] { j[1] = *core->Join(Info("b", false), clock.Now() + absl::Seconds(5)); });
  j[2] = *core->Join(Info("c", false), clock.Now() + absl::Seconds(5));
  j0.join();
  j1.join();
  const auto deadline = clock.Now() + absl::Minutes(5);
  absl::StatusOr<PushResult> rb, ra;
  std::thread tb([&] { rb = core->Push(Grad(j[1].id, 4, 0), std::vector<float>(kParams, 5.0f), deadline); });
  AwaitState([&] { return core->Snapshot().pushes_by_result.count("applied") == 1; });  // b waits in the round
  hold = true;
  std::thread ta([&] { ra = core->Push(Grad(j[0].id, 4, 0), std::vector<float>(kParams, 1.0f), deadline); });
  AwaitState([&] { return gate.inside() == 1; });  // a is adding; c never pushes
  clock.Advance(absl::Seconds(11));                // past the round's deadline: b's wait times out...
  REQUIRE(core->Snapshot().version == 0);          // ...but the round waits for a's sum
  gate.Release();
  ta.join();
  tb.join();
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  REQUIRE(ra->version == 1);
  REQUIRE(rb->version == 1);
  REQUIRE(Weights(*core, j[0].id) == std::vector<float>(kParams, -3.0f));  // a's gradient is in the mean
  REQUIRE(StateOf(core->Snapshot(), j[2].id) == WorkerState::kDropped);
}

TEST_CASE("aggregation=mean counts every push once, whatever its batch (an ablation)", "[core]") {
  for (const bool mean : {false, true}) {
    ServerOptions o = Options(Mode::kSync, 2);
    o.controller.global_batch = 40;
    if (mean) o.aggregation = ServerOptions::Aggregation::kMean;
    auto core = *ParameterServerCore::Create(o);
    JoinInfo ia = Info("a", true);
    ia.max_batch = 10;  // the plan: a 10, b 30
    JoinResult a, b;
    std::thread ta([&] { a = *core->Join(ia, Soon()); });
    AwaitState([&] { return core->Snapshot().parameter_count > 0; });
    b = *core->Join(Info("b", false), Soon());
    ta.join();
    std::thread push_a([&] { REQUIRE(core->Push(Grad(a.id, 10, 0), std::vector<float>(kParams, 1.0f), Soon()).ok()); });
    REQUIRE(core->Push(Grad(b.id, 30, 0), std::vector<float>(kParams, 5.0f), Soon()).ok());
    push_a.join();
    // weighted: (10 * 1 + 30 * 5) / 40 = 4; mean: (1 + 5) / 2 = 3.
    REQUIRE(Weights(*core, a.id)[0] == Approx(mean ? -3.0 : -4.0));
  }
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
