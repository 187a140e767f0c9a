#include "worker/client/session.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <utility>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "common/await_state.h"

namespace omnilearn {
namespace worker {
namespace {

// A scripted server: calls fail with the queued statuses first, then behave.
class FakeServer : public PsClient {
 public:
  absl::StatusOr<JoinReply> Join(const JoinRequest& request, const ModelLayout&,
                                 absl::Span<const float> initial) override {
    absl::MutexLock lock(&mu_);
    ++joins;
    resume_ids.push_back(request.resume_worker_id);
    resume_secrets.push_back(request.resume_secret);
    if (absl::Status s = Next(join_failures); !s.ok()) return s;
    if (join_action == Action::kStop) {
      JoinReply stop;
      stop.action = Action::kStop;
      return stop;
    }
    if (!has_model) {
      if (initial.empty() && !explicit_ask) return absl::FailedPreconditionError("the server has no model yet");
      if (initial.empty()) {
        JoinReply ask;
        ask.send_model = true;
        ask.message = "the server has no model yet";
        return ask;
      }
      has_model = true;
      model.assign(initial.begin(), initial.end());
    }
    if (!initial.empty()) ++joins_with_parameters;
    JoinReply r;
    r.worker_id = ++last_id;
    r.session_secret = "secret-" + std::to_string(last_id);
    r.lease_seconds = 3;
    r.batch_size = 16;
    r.global_samples = global_samples;
    r.push_trailer = trailers;
    r.samples = {SampleSpan{0, {}}};
    for (uint64_t i = 0; i < 16; ++i) r.samples[0].ids.push_back(100 + i);
    return r;
  }
  absl::StatusOr<uint64_t> Pull(uint64_t id, uint64_t have, const ModelLayout&, absl::Span<float> weights) override {
    absl::MutexLock lock(&mu_);
    ++pulls;
    if (absl::Status s = Next(pull_failures); !s.ok()) return s;
    if (id != last_id) return absl::NotFoundError("unknown worker");
    if (have != version) std::copy(model.begin(), model.end(), weights.begin());
    return version;
  }
  absl::StatusOr<PushReply> Push(const PushedStep& p, const ModelLayout&, absl::Span<const float>) override {
    absl::MutexLock lock(&mu_);
    ++pushes;
    if (absl::Status s = Next(push_failures); !s.ok()) return s;
    if (p.worker_id != last_id) return absl::NotFoundError("unknown worker");
    pushed.push_back(p);
    PushReply r;
    r.action = next_action;
    r.next_batch_size = 24;
    r.global_samples = global_samples += p.step.batch_size;
    r.samples = {SampleSpan{1, {}}};
    for (uint64_t i = 0; i < 24; ++i) r.samples[0].ids.push_back(i);
    if (idle_next) {  // the job's samples are all handed out
      r.samples.clear();
      r.idle = true;
    }
    ++version;
    return r;
  }
  // Push, then Pull: the fake's round trip.
  absl::StatusOr<PushReply> PushPull(const PushedStep& p, const ModelLayout& layout, absl::Span<const float> gradient,
                                     uint64_t* model_version, absl::Span<float> weights) override {
    absl::StatusOr<PushReply> r = Push(p, layout, gradient);
    if (!r.ok() || r->action != Action::kContinue) return r;
    absl::StatusOr<uint64_t> v = Pull(p.worker_id, p.model_version, layout, weights);
    if (!v.ok()) return v.status();
    *model_version = *v;
    return r;
  }
  // A streamed push (only when `trailers`): records the tensors as sent, answers as Push,
  // and brings the model (or, with `arrival_failure`, breaks part way).
  class Stream : public PushStream {
   public:
    Stream(FakeServer* server, PushedStep push) : server_(server), push_(std::move(push)) {}
    void Send(const std::vector<int>& tensors) override {
      absl::MutexLock lock(&server_->mu_);
      server_->sent.insert(server_->sent.end(), tensors.begin(), tensors.end());
    }
    absl::StatusOr<PushReply> FinishEarly(const StepEnd& end, uint64_t* model_version,
                                          absl::Span<float> weights) override {
      push_.step.end = end;
      absl::StatusOr<PushReply> r = server_->Push(push_, Layout2(), {});
      absl::MutexLock lock(&server_->mu_);
      server_->trailer_times.push_back(end.compute_seconds);
      *model_version = server_->version;
      weights_ = weights;
      return r;
    }
    bool AwaitTensor(int) override { return true; }
    absl::Status AwaitModel() override {
      absl::MutexLock lock(&server_->mu_);
      if (!server_->arrival_failure.ok()) {
        weights_[0] = -1;  // partly written
        return std::exchange(server_->arrival_failure, absl::OkStatus());
      }
      std::copy(server_->model.begin(), server_->model.end(), weights_.begin());
      return absl::OkStatus();
    }

   private:
    FakeServer* server_;
    PushedStep push_;
    absl::Span<float> weights_;
  };
  absl::StatusOr<std::unique_ptr<PushStream>> StartPushPull(const PushedStep& push, const ModelLayout&,
                                                            absl::Span<const float>) override {
    return std::unique_ptr<PushStream>(new Stream(this, push));
  }
  static ModelLayout Layout2() { return *ModelLayout::Create({{"a", {1}}, {"b", {2}}}); }

  absl::StatusOr<Action> Heartbeat(uint64_t id) override {
    absl::MutexLock lock(&mu_);
    ++heartbeats;
    return id == last_id ? heartbeat_action : Action::kRejoin;
  }
  void SetSessionSecret(const std::string& secret) override {
    absl::MutexLock lock(&mu_);
    client_secret = secret;
  }
  absl::Status Leave(uint64_t, bool finished) override {
    absl::MutexLock lock(&mu_);
    ++leaves;
    finished_leaves += finished;
    return absl::OkStatus();
  }
  // Records each wait; `connected` answers it at once (a fake's wait takes no time).
  bool AwaitConnection(absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    connection_waits.push_back(timeout);
    return connected;
  }

  absl::Mutex mu_;
  bool has_model = false;
  bool explicit_ask = false;  // asks for the model with JoinReply::send_model (else as earlier releases)
  std::vector<float> model;
  uint64_t last_id = 0, version = 0, global_samples = 0;
  int joins = 0, joins_with_parameters = 0, pushes = 0, heartbeats = 0, leaves = 0, finished_leaves = 0;
  std::vector<uint64_t> resume_ids;
  std::vector<std::string> resume_secrets;
  std::string client_secret;  // what the session told the client to send
  Action join_action = Action::kContinue;
  Action next_action = Action::kContinue;
  Action heartbeat_action = Action::kContinue;
  std::vector<PushedStep> pushed;  // as the client was given them
  std::deque<absl::Status> join_failures, pull_failures, push_failures;
  bool trailers = false;              // the server reads push trailers (streamed pushes)
  bool idle_next = false;             // replies assign nothing: the worker idles
  std::vector<int> sent;              // streamed pushes: tensors in the order sent
  std::vector<double> trailer_times;  // ...and their trailers' compute times
  absl::Status arrival_failure;       // the next streamed model breaks part way
  int pulls = 0;
  bool connected = false;                        // what AwaitConnection answers
  std::vector<absl::Duration> connection_waits;  // the timeouts it was given

 private:
  static absl::Status Next(std::deque<absl::Status>& q) {
    if (q.empty()) return absl::OkStatus();
    absl::Status s = q.front();
    q.pop_front();
    return s;
  }
};

ModelLayout Layout() { return *ModelLayout::Create({{"w", {3}}}); }

SessionOptions Options(const FakeClock* clock, std::vector<std::string>* log) {
  SessionOptions o;
  o.worker.name = "w0";
  o.clock = clock;
  o.heartbeats = false;
  o.log = [log](const std::string& line) { log->push_back(line); };
  return o;
}

const std::vector<float> kMine = {1, 2, 3};

TEST_CASE("training ends at the job's samples, rounded up, or at the worker's own iterations", "[session]") {
  REQUIRE(JobSamples(2.5, 10) == 25);
  REQUIRE(JobSamples(1.0 / 3, 10) == 4);  // 3.33...: the worker ends once 4 are trained
  REQUIRE_FALSE(TrainingDone(3, 1.0 / 3, 10, 1, 0));
  REQUIRE(TrainingDone(4, 1.0 / 3, 10, 1, 0));
  REQUIRE_FALSE(TrainingDone(1000, 0, 10, 5, 6));  // no epochs: the iterations alone
  REQUIRE(TrainingDone(0, 0, 10, 6, 6));
  REQUIRE(TrainingDone(0, 2, 10, 6, 6));             // whichever comes first
  REQUIRE_FALSE(TrainingDone(1 << 20, 2, 0, 1, 0));  // epochs of an unknown data set never end by count
}

TEST_CASE("the first worker brings the model, the others never send theirs", "[session]") {
  FakeClock clock;
  FakeServer server;
  server.explicit_ask = GENERATE(false, true);  // a server of an earlier release, one of this
  std::vector<std::string> log;
  Session first(&server, Layout(), Options(&clock, &log));
  REQUIRE(first.Join(kMine).ok());
  REQUIRE(server.joins == 2);  // asked without parameters, then brought them
  REQUIRE(server.joins_with_parameters == 1);
  Session second(&server, Layout(), Options(&clock, &log));
  REQUIRE(second.Join({9, 9, 9}).ok());
  REQUIRE(server.joins_with_parameters == 1);
  REQUIRE(server.model == kMine);
  std::vector<float> w(3);
  REQUIRE(*second.Pull(absl::MakeSpan(w)));
  REQUIRE(w == kMine);
  REQUIRE_FALSE(*second.Pull(absl::MakeSpan(w)));  // up to date
}

TEST_CASE("a server outage is ridden out with capped backoff, then the worker rejoins", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  SessionOptions o = Options(&clock, &log);
  o.backoff_initial = absl::Milliseconds(100);
  o.backoff_max = absl::Seconds(1);
  Session s(&server, Layout(), o);
  REQUIRE(s.Join(kMine).ok());
  std::vector<float> w(3);
  REQUIRE(s.Pull(absl::MakeSpan(w)).ok());
  server.push_failures = {absl::UnavailableError("Socket closed")};
  for (int i = 0; i < 8; ++i) server.join_failures.push_back(absl::UnavailableError("Connection refused"));
  const absl::Time before = clock.Now();
  PushReply reply;
  StepReport h;
  h.batch_size = 16;
  absl::StatusOr<PushOutcome> r = s.Push(h, {0.1f, 0.1f, 0.1f}, w, &reply);
  REQUIRE(r.ok());
  REQUIRE(*r == PushOutcome::kRejoined);
  REQUIRE(s.rejoins() == 1);
  REQUIRE(server.joins_with_parameters == 1);  // the server kept its model: nothing re-sent
  // 9 waits: 0.1, 0.2, 0.4, 0.8 then 1 s each, each scaled by a jitter in [0.5, 1].
  const double waited = absl::ToDoubleSeconds(clock.Now() - before);
  CAPTURE(waited);
  REQUIRE(waited >= 0.5 * (0.1 + 0.2 + 0.4 + 0.8 + 5 * 1.0));
  REQUIRE(waited <= 0.1 + 0.2 + 0.4 + 0.8 + 5 * 1.0);
  // Each wait was spent on the client's connection, and taken whole.
  REQUIRE(server.connection_waits.size() == 9);
  absl::Duration spent;
  for (absl::Duration d : server.connection_waits) spent += d;
  REQUIRE(spent == clock.Now() - before);
  REQUIRE(log.front().find("waiting for the server") != std::string::npos);
  REQUIRE(log.back().find("rejoined as worker 2") != std::string::npos);
  REQUIRE(*s.Pull(absl::MakeSpan(w)));  // the caller pulls the server's model again
}

// A client whose connection comes up `after` into a wait, moving the clock as a real wait would.
class ConnectingServer : public FakeServer {
 public:
  ConnectingServer(FakeClock* clock, absl::Duration after) : clock_(clock), after_(after) {}
  bool AwaitConnection(absl::Duration timeout) override {
    clock_->Advance(std::min(after_, timeout));
    return after_ <= timeout;
  }

 private:
  FakeClock* const clock_;
  const absl::Duration after_;
};

TEST_CASE("a pause before a retry is spent on the connection and taken whole, connected or not", "[session]") {
  FakeClock clock;
  const absl::Duration pause = absl::Seconds(1);
  ConnectingServer soon(&clock, absl::Milliseconds(300));
  absl::Time start = clock.Now();
  PauseBeforeRetry(clock, soon, pause);
  REQUIRE(clock.Now() - start == pause);  // connected at 0.3 s, the rest slept: no tight loop
  ConnectingServer never(&clock, absl::InfiniteDuration());
  start = clock.Now();
  PauseBeforeRetry(clock, never, pause);
  REQUIRE(clock.Now() - start == pause);  // the wait was the pause: not slept again

  // A session's pauses between joins go to the client's connection, connected or not.
  FakeServer server;
  server.connected = GENERATE(false, true);
  std::vector<std::string> log;
  SessionOptions o = Options(&clock, &log);
  o.backoff_initial = absl::Milliseconds(100);
  Session s(&server, Layout(), o);
  server.join_failures = {absl::UnavailableError("Connection refused"), absl::UnavailableError("Socket closed")};
  REQUIRE(s.Join(kMine).ok());
  REQUIRE(server.connection_waits.size() == 2);
}

TEST_CASE("an outage longer than reconnect_timeout is a clear error", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  SessionOptions o = Options(&clock, &log);
  o.reconnect_timeout = absl::Seconds(30);
  Session s(&server, Layout(), o);
  REQUIRE(s.Join(kMine).ok());
  for (int i = 0; i < 1000; ++i) server.join_failures.push_back(absl::UnavailableError("Connection refused"));
  server.pull_failures = {absl::UnavailableError("Socket closed")};
  std::vector<float> w(3);
  absl::Status st = s.Pull(absl::MakeSpan(w)).status();
  REQUIRE(absl::IsUnavailable(st));
  REQUIRE(st.message().find("did not come back within 30 s") != absl::string_view::npos);
  REQUIRE(clock.Now() - absl::FromUnixSeconds(1000000000) >= absl::Seconds(30));
  REQUIRE(log.size() >= 3);  // one line when it started, then one per 10 s
  REQUIRE(log.size() <= 5);
}

TEST_CASE("a worker restarted under its name waits, saying why, until the old session ends", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  SessionOptions o = Options(&clock, &log);
  o.connect_timeout = absl::Seconds(10);  // shorter than the old session's lease: no bound on this wait
  o.reconnect_timeout = absl::Seconds(120);
  server.has_model = true;
  for (int i = 0; i < 12; ++i) {
    server.join_failures.push_back(absl::AlreadyExistsError("the name 'w0' belongs to a live worker (lease 60 s)"));
  }
  Session s(&server, Layout(), o);
  REQUIRE(s.Join(kMine).ok());
  REQUIRE(server.joins == 13);
  REQUIRE(clock.Now() - absl::FromUnixSeconds(1000000000) > absl::Seconds(10));  // past connect_timeout
  REQUIRE(std::any_of(log.begin(), log.end(), [](const std::string& line) {
    return absl::StrContains(line, "our name is still another session's");
  }));
  // Two live workers under one name: an error once the reconnect window ran out.
  FakeClock clock2;
  FakeServer taken;
  taken.has_model = true;
  for (int i = 0; i < 1000; ++i) taken.join_failures.push_back(absl::AlreadyExistsError("the name 'w0' is taken"));
  Session s2(&taken, Layout(), Options(&clock2, &log));
  const absl::Status st = s2.Join(kMine);
  REQUIRE(absl::IsAlreadyExists(st));
  REQUIRE(absl::StrContains(st.message(), "two workers share a --name"));
  REQUIRE(clock2.Now() - absl::FromUnixSeconds(1000000000) >= SessionOptions().reconnect_timeout);
}

TEST_CASE("a server never reached is an error after connect_timeout, at once when its name does not resolve",
          "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  SessionOptions o = Options(&clock, &log);
  o.connect_timeout = absl::Seconds(10);
  o.reconnect_timeout = absl::Seconds(300);
  o.server_hint = "--server=ps:1";
  for (int i = 0; i < 1000; ++i) server.join_failures.push_back(absl::UnavailableError("Connection refused"));
  Session s(&server, Layout(), o);
  absl::Status st = s.Join(kMine);
  REQUIRE(absl::IsUnavailable(st));
  CAPTURE(st.message());
  REQUIRE(absl::StrContains(st.message(), "never reached the server within 10 s"));
  REQUIRE(absl::StrContains(st.message(), "check the server's address and that it is running (--server=ps:1)"));
  REQUIRE(clock.Now() - absl::FromUnixSeconds(1000000000) >= absl::Seconds(10));
  REQUIRE(clock.Now() - absl::FromUnixSeconds(1000000000) < absl::Seconds(15));

  FakeClock clock2;
  FakeServer unresolved;
  unresolved.join_failures = {absl::UnavailableError("DNS resolution failed for locahost:50051: not found")};
  Session s2(&unresolved, Layout(), Options(&clock2, &log));
  st = s2.Join(kMine);
  REQUIRE(absl::StrContains(st.message(), "the server's address does not resolve"));
  REQUIRE(clock2.Now() == absl::FromUnixSeconds(1000000000));  // no wait at all
  REQUIRE(unresolved.joins == 1);
}

TEST_CASE("NOT_FOUND and ACTION_REJOIN rejoin at once; ACTION_STOP stops", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  Session s(&server, Layout(), Options(&clock, &log));
  REQUIRE(s.Join(kMine).ok());
  std::vector<float> w(3);
  REQUIRE(s.Pull(absl::MakeSpan(w)).ok());
  PushReply reply;
  StepReport h;
  h.batch_size = 16;
  const absl::Time t0 = clock.Now();
  server.last_id = 99;  // the server forgot us (lease expired, restarted)
  REQUIRE(*s.Push(h, w, w, &reply) == PushOutcome::kRejoined);
  REQUIRE(clock.Now() == t0);  // no backoff for a server that answers
  REQUIRE(s.worker_id() == 100);
  REQUIRE(s.Pull(absl::MakeSpan(w)).ok());
  REQUIRE(s.samples().size() == 1);
  REQUIRE(s.samples()[0].ids.size() == 16);
  REQUIRE(*s.Push(h, w, w, &reply) == PushOutcome::kReplied);
  REQUIRE(s.batch() == 24);
  REQUIRE(s.samples()[0].epoch == 1);  // the reply's assignment replaces the join's
  REQUIRE(s.samples()[0].ids.size() == 24);
  REQUIRE(server.pushed.back().worker_id == 100);  // the session names itself and the model
  REQUIRE(server.pushed.back().model_version == s.model_version());
  REQUIRE(server.pushed.back().step.batch_size == 16);
  server.next_action = Action::kRejoin;
  REQUIRE(*s.Push(h, w, w, &reply) == PushOutcome::kRejoined);
  REQUIRE(server.resume_ids.back() == 100);               // the rejoin names the session it replaces...
  REQUIRE(server.resume_secrets.back() == "secret-100");  // ...and proves it is its own
  REQUIRE(server.client_secret == "secret-101");          // then sends the new session's secret
  server.next_action = Action::kStop;
  REQUIRE(s.Pull(absl::MakeSpan(w)).ok());
  REQUIRE(*s.Push(h, w, w, &reply) == PushOutcome::kStop);
  REQUIRE(s.stop_requested());
  s.Leave(/*finished=*/false);
  REQUIRE(server.leaves == 1);
  REQUIRE(server.finished_leaves == 0);
}

TEST_CASE("PushPull brings the new model with the reply", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  Session s(&server, Layout(), Options(&clock, &log));
  REQUIRE(s.Join(kMine).ok());
  std::vector<float> w(3);
  REQUIRE(s.Pull(absl::MakeSpan(w)).ok());
  PushReply reply;
  bool changed = false;
  REQUIRE(*s.PushPull({}, w, absl::MakeSpan(w), &reply, &changed) == PushOutcome::kReplied);
  REQUIRE(changed);  // the push moved the fake server's version
  REQUIRE(s.model_version() == server.version);
  REQUIRE(w == server.model);
}

TEST_CASE("a worker without samples idles: an idle push, then the model; samples put back end it", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  Session s(&server, Layout(), Options(&clock, &log));
  REQUIRE(s.Join(kMine).ok());
  REQUIRE_FALSE(s.idle());
  std::vector<float> w(3);
  REQUIRE(s.Pull(absl::MakeSpan(w)).ok());
  server.idle_next = true;
  PushReply reply;
  bool changed = false;
  StepReport step;
  step.batch_size = 16;
  REQUIRE(*s.PushPull(step, w, absl::MakeSpan(w), &reply, &changed) == PushOutcome::kReplied);
  REQUIRE(s.idle());
  REQUIRE(s.samples().empty());
  server.model = {7, 7, 7};
  REQUIRE(*s.Idle(absl::MakeSpan(w), &reply, &changed) == PushOutcome::kReplied);
  REQUIRE(server.pushed.back().step.idle);
  REQUIRE(server.pushed.back().step.batch_size == 0);
  REQUIRE(changed);  // the round it waited in moved the model
  REQUIRE(w == server.model);
  REQUIRE(s.idle());
  server.idle_next = false;  // a lost worker's samples came back
  REQUIRE(*s.Idle(absl::MakeSpan(w), &reply, &changed) == PushOutcome::kReplied);
  REQUIRE_FALSE(s.idle());
  REQUIRE(CountSamples(s.samples()) == 24);
}

TEST_CASE("a server shutting down answers a join with stop; an interrupt ends the wait for a server", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  server.join_action = Action::kStop;
  Session stopped(&server, Layout(), Options(&clock, &log));
  REQUIRE(stopped.Join(kMine).ok());
  REQUIRE(stopped.stop_requested());
  std::vector<float> w(3);
  PushReply reply;
  REQUIRE(*stopped.Push({}, w, w, &reply) == PushOutcome::kStop);
  REQUIRE(server.pushes == 0);

  server.join_action = Action::kContinue;
  std::atomic<bool> interrupted{false};
  SessionOptions o = Options(&clock, &log);
  o.interrupted = &interrupted;
  Session s(&server, Layout(), o);
  server.join_failures = {absl::UnavailableError("down"), absl::UnavailableError("down")};
  interrupted.store(true);
  REQUIRE(absl::IsCancelled(s.Join(kMine)));
}

TEST_CASE("errors that are not faults are returned as they are", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  Session s(&server, Layout(), Options(&clock, &log));
  server.join_failures = {absl::InvalidArgumentError("model layout differs")};
  REQUIRE(absl::IsInvalidArgument(s.Join(kMine)));
  REQUIRE(s.Join(kMine).ok());
  std::vector<float> w(3);
  server.push_failures = {absl::InvalidArgumentError("gradient contains NaN")};
  PushReply reply;
  REQUIRE(absl::IsInvalidArgument(s.Push({}, w, w, &reply).status()));
}

TEST_CASE("heartbeats run every lease/3 and bring a rejoin request to the next push", "[session]") {
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  SessionOptions o = Options(&clock, &log);
  o.heartbeats = true;
  Session s(&server, Layout(), o);
  REQUIRE(s.Join(kMine).ok());  // lease 3 s: a heartbeat every second
  auto heartbeats = [&] {
    absl::MutexLock lock(&server.mu_);
    return server.heartbeats;
  };
  auto await = [&](int n) {  // drives the clock until the heartbeat thread has sent n
    REQUIRE(AwaitState([&] {
      clock.Advance(absl::Milliseconds(100));
      return heartbeats() >= n;
    }));
  };
  await(3);
  {
    absl::MutexLock lock(&server.mu_);
    server.heartbeat_action = Action::kRejoin;
  }
  const int seen = heartbeats();
  await(seen + 2);
  std::vector<float> w(3);
  PushReply reply;
  const int pushes = server.pushes;
  REQUIRE(*s.Push({}, w, w, &reply) == PushOutcome::kRejoined);
  REQUIRE(server.pushes == pushes);  // rejoined before pushing a gradient of the old session
  // After Leave the heartbeat thread has ended (joined): a departed session sends nothing.
  REQUIRE(s.heartbeats_running());
  s.Leave(/*finished=*/true);
  REQUIRE_FALSE(s.heartbeats_running());
}

// A joined session with the model pulled, against a server that reads push trailers, and
// a push's header and trailer (16 samples, 0.25 s).
struct Streaming {
  Streaming() : s(&server, FakeServer::Layout2(), Options(&clock, &log)) {
    server.trailers = true;  // said in its join reply
    REQUIRE(s.Join({1, 2, 3}).ok());
    REQUIRE(s.Pull(absl::MakeSpan(w)).ok());
    h.batch_size = 16;
    end.compute_seconds = 0.25;
  }
  absl::StatusOr<PushOutcome> Finish(std::unique_ptr<StreamedPush> push, bool early = false) {
    return s.FinishPushPull(std::move(push), end, absl::MakeSpan(w), &reply, &changed, early);
  }
  FakeClock clock;
  FakeServer server;
  std::vector<std::string> log;
  Session s;
  std::vector<float> w = std::vector<float>(3), g = std::vector<float>(3, 0.5f);
  StepReport h;
  StepEnd end;
  PushReply reply;
  bool changed = false;
};

TEST_CASE("a streamed push sends whole buckets as backward finishes them, then the trailer", "[session][bucket]") {
  Streaming t;
  std::unique_ptr<StreamedPush> push = t.s.BeginPushPull(t.h, t.g, /*bucket_bytes=*/4);  // a tensor a bucket
  REQUIRE(push->streaming());
  push->Ready(1);  // backward: the last tensor first
  push->Ready(1);  // repeated: sent once
  push->Ready(0);
  REQUIRE(t.server.sent == std::vector<int>{1, 0});
  auto r = t.Finish(std::move(push));
  REQUIRE(r.ok());
  REQUIRE(*r == PushOutcome::kReplied);
  REQUIRE(t.changed);
  REQUIRE(t.server.trailer_times == std::vector<double>{0.25});
  REQUIRE(t.s.model_version() == t.server.version);
  // bucket_bytes 0, or a server without trailers: nothing streams, the push goes whole.
  REQUIRE_FALSE(t.s.BeginPushPull(t.h, t.g, 0)->streaming());
  t.server.trailers = false;
  REQUIRE(t.s.Join({1, 2, 3}).ok());
  auto whole = t.s.BeginPushPull(t.h, t.g, 4);
  REQUIRE_FALSE(whole->streaming());
  const int pushes = t.server.pushes;
  REQUIRE(t.Finish(std::move(whole)).ok());
  REQUIRE(t.server.pushes == pushes + 1);
  REQUIRE(t.server.trailer_times.size() == 1);
}

TEST_CASE("a model still arriving is waited for; one whose stream broke is pulled whole", "[session][bucket]") {
  Streaming t;
  t.server.model = {7, 8, 9};
  t.server.arrival_failure = absl::UnavailableError("Socket closed");
  auto r = t.Finish(t.s.BeginPushPull(t.h, t.g, 4), /*early=*/true);
  REQUIRE(r.ok());
  REQUIRE(*r == PushOutcome::kReplied);
  const int pulls = t.server.pulls;
  REQUIRE(t.s.AwaitModel().ok());  // the stream broke: the whole model is pulled instead
  REQUIRE(t.server.pulls == pulls + 1);
  REQUIRE(t.w == std::vector<float>{7, 8, 9});
  REQUIRE(t.s.model_version() == t.server.version);
  // The next one arrives whole; the next call of the session waits for it.
  t.server.model = {4, 5, 6};
  REQUIRE(t.Finish(t.s.BeginPushPull(t.h, t.g, 4), true).ok());
  REQUIRE(t.s.Pull(absl::MakeSpan(t.w)).ok());
  REQUIRE(t.w == std::vector<float>{4, 5, 6});
  REQUIRE(t.server.pulls == pulls + 2);
}

TEST_CASE("a model whose stream broke and whose pull had to join again leaves the step to be redone",
          "[session][bucket]") {
  Streaming t;
  // Whole pushes (the C++ trainer): the reply said batch 24, but the session it came from
  // is gone: the outcome is a rejoin, and the new session's batch stands.
  t.server.arrival_failure = absl::UnavailableError("Socket closed");
  t.server.pull_failures = {absl::NotFoundError("unknown worker")};
  const uint64_t first = t.s.worker_id();
  auto r = t.Finish(t.s.BeginPushPull(t.h, t.g, 4));
  REQUIRE(r.ok());
  REQUIRE(*r == PushOutcome::kRejoined);
  REQUIRE(t.s.worker_id() != first);
  REQUIRE(t.s.batch() == 16);  // the join's, not the old reply's 24
  // Early (Python): the repair comes with the next call; a push begun before it is of the
  // old session and is not sent.
  REQUIRE(t.Finish(t.s.BeginPushPull(t.h, t.g, 4), /*early=*/true).ok());
  t.server.arrival_failure = absl::UnavailableError("Socket closed");  // that model's stream breaks
  std::unique_ptr<StreamedPush> begun = t.s.BeginPushPull(t.h, t.g, 4);
  t.server.pull_failures = {absl::NotFoundError("unknown worker")};
  const int pushes = t.server.pushes;
  auto late = t.Finish(std::move(begun), true);
  REQUIRE(late.ok());
  REQUIRE(*late == PushOutcome::kRejoined);
  REQUIRE(t.server.pushes == pushes);  // nothing of the old session was pushed
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
