#include "worker/client/sharded_ps_client.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

// Two tensors of 6 and 4 values, cut over 2 slices in partitions of 2 floats (8 bytes).
ModelLayout Layout() { return *ModelLayout::Create({{"w", {2, 3}}, {"b", {4}}}); }
constexpr int64_t kPartitionBytes = 8;

// What the job's streams were asked, in the order asked ("send 1", "close 0", ...: the
// call, then the slice). The slices' calls come from several threads.
struct Calls {
  void Add(const std::string& call) {
    absl::MutexLock lock(&mu);
    seen.push_back(call);
  }
  std::vector<std::string> Seen() {
    absl::MutexLock lock(&mu);
    return seen;
  }
  absl::Mutex mu;
  std::vector<std::string> seen ABSL_GUARDED_BY(mu);
};

// One server of the job, holding its slice: a step subtracts the gradient and moves the
// version by one (or to `reply_version` when a test sets it).
class FakeSlice : public PsClient {
 public:
  struct Stream : public PushStream {
    FakeSlice* server;
    PushedStep push;
    absl::Span<const float> gradient;
    std::vector<int> sent;
    absl::Span<float> weights;
    void Send(const std::vector<int>& tensors) override {
      server->calls->Add(absl::StrCat("send ", server->slice));
      sent.insert(sent.end(), tensors.begin(), tensors.end());
    }
    void CloseWrites(const StepEnd&) override { server->calls->Add(absl::StrCat("close ", server->slice)); }
    absl::StatusOr<PushReply> FinishEarly(const StepEnd&, uint64_t* model_version, absl::Span<float> w) override {
      server->calls->Add(absl::StrCat("finish ", server->slice));
      server->streamed.push_back(sent);
      absl::StatusOr<PushReply> r = server->Take(push, gradient);
      if (!r.ok()) return r;
      std::copy(server->model.begin(), server->model.end(), w.begin());
      *model_version = r->model_version;
      return r;
    }
    bool AwaitTensor(int) override { return true; }
    absl::Status AwaitModel() override { return absl::OkStatus(); }
  };

  absl::StatusOr<JoinReply> Join(const JoinRequest&, const ModelLayout&, absl::Span<const float>) override {
    return join;
  }
  absl::StatusOr<uint64_t> Pull(uint64_t, uint64_t have, const ModelLayout& layout, absl::Span<float> w) override {
    return PullAtLeast(0, have, 0, layout, w);
  }
  absl::StatusOr<uint64_t> PullAtLeast(uint64_t, uint64_t have, uint64_t min_version, const ModelLayout&,
                                       absl::Span<float> w) override {
    pulled_at_least.push_back(min_version);
    pulled_having.push_back(have);
    if (!pull_failures.empty()) {
      const absl::Status failure = pull_failures.front();
      pull_failures.erase(pull_failures.begin());
      std::fill(w.begin(), w.end(), -99.0f);  // partly written on the way
      return failure;
    }
    if (version < min_version) version = min_version;  // the shard waits until it is there
    if (have != version) std::copy(model.begin(), model.end(), w.begin());
    return version;
  }
  absl::StatusOr<PushReply> Push(const PushedStep& p, const ModelLayout&, absl::Span<const float> g) override {
    pushed.push_back(p);
    return Take(p, g);
  }
  absl::StatusOr<PushReply> PushPull(const PushedStep& p, const ModelLayout&, absl::Span<const float> g,
                                     uint64_t* model_version, absl::Span<float> w) override {
    pushed.push_back(p);
    absl::StatusOr<PushReply> r = Take(p, g);
    if (!r.ok()) return r;
    std::copy(model.begin(), model.end(), w.begin());
    *model_version = r->model_version;
    return r;
  }
  absl::StatusOr<std::unique_ptr<PushStream>> StartPushPull(const PushedStep& p, const ModelLayout&,
                                                            absl::Span<const float> g) override {
    pushed.push_back(p);
    auto s = std::make_unique<Stream>();
    s->server = this;
    s->push = p;
    s->gradient = g;
    return std::unique_ptr<PushStream>(std::move(s));
  }
  void SetSessionSecret(const std::string&) override {}
  absl::StatusOr<Action> Heartbeat(uint64_t) override {
    ++heartbeats;
    return heartbeat;
  }
  absl::Status Leave(uint64_t, bool) override { return absl::OkStatus(); }
  bool AwaitConnection(absl::Duration timeout) override {
    connection_waits.push_back(timeout);
    return false;
  }

  // A push as a shard takes it: the next of `failures` fails it (after the step when
  // `lose_reply`: its reply lost on the way); a resent slice of the version stepped last is
  // answered applied without a step.
  absl::StatusOr<PushReply> Take(const PushedStep& p, absl::Span<const float> g) {
    if (!failures.empty()) {
      const absl::Status failure = failures.front();
      failures.erase(failures.begin());
      if (lose_reply) (void)Take(p, g);
      return failure;
    }
    if (p.resend && taken_version == p.model_version) {
      PushReply r;
      r.applied = true;
      r.model_version = version;
      return r;
    }
    taken_version = p.model_version;
    ++steps;
    return Step(g);
  }

  absl::StatusOr<PushReply> Step(absl::Span<const float> g) {
    for (size_t i = 0; i < model.size(); ++i) model[i] -= g[i];
    version = reply_version > 0 ? reply_version : version + 1;
    PushReply r;
    r.applied = true;
    r.model_version = version;
    r.held_seconds = held_seconds;
    return r;
  }

  JoinReply join;
  int slice = 0;
  Calls* calls = nullptr;
  std::vector<float> model;
  uint64_t version = 0, reply_version = 0;
  double held_seconds = 0;
  std::vector<absl::Status> failures, pull_failures;
  bool lose_reply = false;
  uint64_t taken_version = ~0ull;
  int steps = 0;
  std::vector<PushedStep> pushed;
  std::vector<std::vector<int>> streamed;
  std::vector<uint64_t> pulled_at_least, pulled_having;
  std::vector<absl::Duration> connection_waits;  // the timeouts AwaitConnection was given
  Action heartbeat = Action::kContinue;          // what Heartbeat answers
  int heartbeats = 0;
};

struct Job {
  explicit Job(bool in_order = false) {
    map = *ShardMap::Plan(Layout(), 2, kPartitionBytes);
    auto c = std::make_unique<FakeSlice>();
    auto s = std::make_unique<FakeSlice>();
    coordinator = c.get();
    shard = s.get();
    shard->slice = 1;
    coordinator->calls = shard->calls = &calls;
    coordinator->join.push_slices_in_order = in_order;
    coordinator->join.worker_id = 1;
    coordinator->join.shards = 2;
    coordinator->join.partition_bytes = kPartitionBytes;
    coordinator->join.shard_fingerprint = map.fingerprint();
    coordinator->join.shard_addresses = {"coordinator:1", "shard:1"};
    // Slice s's values: the model's, gathered (the model is 0, 1, ..., 9).
    for (int i = 0; i < 10; ++i) model.push_back(static_cast<float>(i));
    for (int k = 0; k < 2; ++k) {
      FakeSlice* f = k == 0 ? coordinator : shard;
      f->model.resize(map.slice_elements(k));
      map.Gather(k, model, absl::MakeSpan(f->model));
    }
    auto made = std::make_shared<std::unique_ptr<PsClient>>(std::move(s));
    client = std::make_unique<ShardedPsClient>(
        std::move(c),
        [made](const std::string&) { return absl::StatusOr<std::unique_ptr<PsClient>>(std::move(*made)); }, &clock);
    REQUIRE(client->Join(JoinRequest{}, Layout(), model).ok());
    REQUIRE(client->shards() == 2);
  }
  FakeClock clock;  // the resends' backoff passes at once
  ShardMap map;
  Calls calls;
  FakeSlice* coordinator;
  FakeSlice* shard;
  std::vector<float> model;
  std::unique_ptr<ShardedPsClient> client;
};

// A streamed push of worker 1's `gradient` through the whole job.
std::unique_ptr<PushStream> StreamOf(Job& job, absl::Span<const float> gradient) {
  PushedStep push;
  push.worker_id = 1;
  absl::StatusOr<std::unique_ptr<PushStream>> stream = job.client->StartPushPull(push, Layout(), gradient);
  REQUIRE(stream.ok());
  return *std::move(stream);
}

TEST_CASE("a streamed push sends each tensor's pieces to their slices, and the model comes back whole",
          "[sharded_client]") {
  Job job;
  const std::vector<float> gradient(10, 1.0f);
  PushedStep push;
  push.worker_id = 1;
  auto stream = job.client->StartPushPull(push, Layout(), gradient);
  REQUIRE(stream.ok());
  (*stream)->Send({1});  // "b" first, as backward finishes the last layer first
  (*stream)->Send({0});
  std::vector<float> weights(10, -1.0f);
  uint64_t version = 0;
  absl::StatusOr<PushReply> reply =
      (*stream)->FinishEarly(StepEnd{0.1, 1.0, std::nullopt}, &version, absl::MakeSpan(weights));
  REQUIRE(reply.ok());
  REQUIRE(version == 1);
  // Every piece went to its own slice, once: the slices' streams got their layouts' indices.
  for (int k = 0; k < 2; ++k) {
    FakeSlice* f = k == 0 ? job.coordinator : job.shard;
    REQUIRE(f->streamed.size() == 1);
    std::vector<int> got = f->streamed[0];
    std::sort(got.begin(), got.end());
    std::vector<int> all(job.map.slice(k).size());
    std::iota(all.begin(), all.end(), 0);
    REQUIRE(got == all);
  }
  // A tensor is whole once awaited; the rest once the model is.
  REQUIRE((*stream)->AwaitTensor(1));
  for (int i = 6; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 1);
  REQUIRE((*stream)->AwaitModel().ok());
  for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 1);
}

TEST_CASE("a streamed push's tensors never sent (buffers, what backward did not reach) go at its end",
          "[sharded_client]") {
  for (bool in_order : {false, true}) {
    Job job(in_order);
    const std::vector<float> gradient(10, 1.0f);
    std::unique_ptr<PushStream> stream = StreamOf(job, gradient);
    stream->Send({0});  // "b" never becomes final: the stream's to send at the end
    std::vector<float> weights(10, -1.0f);
    uint64_t version = 0;
    REQUIRE(stream->Finish(StepEnd{0.1, 1.0, std::nullopt}, &version, absl::MakeSpan(weights)).ok());
    for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 1);
  }
}

TEST_CASE("in order, a slice's gradient leaves only once the slice before it is written with its trailer",
          "[sharded_client]") {
  for (bool in_order : {false, true}) {
    Job job(in_order);
    const std::vector<float> gradient(10, 1.0f);
    std::unique_ptr<PushStream> stream = StreamOf(job, gradient);
    stream->Send({1});  // as backward finishes each tensor; both have pieces in both slices
    stream->Send({0});
    const std::vector<std::string> sent = job.calls.Seen();
    std::vector<float> weights(10, -1.0f);
    uint64_t version = 0;
    REQUIRE(stream->Finish(StepEnd{0.1, 1.0, std::nullopt}, &version, absl::MakeSpan(weights)).ok());
    for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 1);
    if (!in_order) {
      REQUIRE(sent == std::vector<std::string>{"send 0", "send 1", "send 0", "send 1"});
      continue;
    }
    REQUIRE(sent == std::vector<std::string>{"send 0", "send 0"});  // slice 0's at once, slice 1's held
    const std::vector<std::string> all = job.calls.Seen();
    const auto at = [&](const std::string& call) { return std::find(all.begin(), all.end(), call) - all.begin(); };
    REQUIRE(at("close 0") < at("send 1"));
    REQUIRE(at("send 1") < at("close 1"));
    REQUIRE(at("close 1") < at("finish 1"));
    REQUIRE(at("close 0") < at("finish 0"));
    std::vector<int> got = job.shard->streamed.at(0);
    std::sort(got.begin(), got.end());
    std::vector<int> want(job.map.slice(1).size());
    std::iota(want.begin(), want.end(), 0);
    REQUIRE(got == want);  // every piece of slice 1, sent in its turn
  }
}

TEST_CASE("in order, a whole push goes through the slices' streams in turn", "[sharded_client]") {
  Job job(/*in_order=*/true);
  const std::vector<float> gradient(10, 1.0f);
  PushedStep push;
  push.worker_id = 1;
  push.step.end = StepEnd{0.2, 1.0, std::nullopt};
  std::vector<float> weights(10, -1.0f);
  uint64_t version = 0;
  REQUIRE(job.client->PushPull(push, Layout(), gradient, &version, absl::MakeSpan(weights)).ok());
  REQUIRE(version == 1);
  for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 1);
  const std::vector<std::string> all = job.calls.Seen();
  const auto at = [&](const std::string& call) { return std::find(all.begin(), all.end(), call) - all.begin(); };
  REQUIRE(at("close 0") < at("send 1"));
  REQUIRE(at("close 1") < static_cast<std::ptrdiff_t>(all.size()));
}

TEST_CASE("a slice that comes back at another version is pulled at the coordinator's", "[sharded_client]") {
  Job job;
  const std::vector<float> gradient(10, 1.0f);
  job.shard->reply_version = 0;
  job.coordinator->reply_version = 3;  // async: other workers' steps reached the coordinator first
  PushedStep push;
  push.worker_id = 1;
  std::vector<float> weights(10, 0.0f);
  uint64_t version = 0;
  auto stream = job.client->StartPushPull(push, Layout(), gradient);
  REQUIRE(stream.ok());
  (*stream)->Send({0, 1});
  REQUIRE((*stream)->FinishEarly(StepEnd{0.1, 1.0, std::nullopt}, &version, absl::MakeSpan(weights)).ok());
  REQUIRE((*stream)->AwaitModel().ok());
  REQUIRE(version == 3);
  REQUIRE(job.shard->pulled_at_least == std::vector<uint64_t>{3});
  REQUIRE(job.shard->version == 3);
  for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 1);
}

TEST_CASE("the longest a shard held a push goes to the coordinator with the next", "[sharded_client]") {
  Job job;
  const std::vector<float> gradient(10, 0.0f);
  PushedStep push;
  push.worker_id = 1;
  job.shard->held_seconds = 0.25;
  job.coordinator->held_seconds = 0.5;  // the coordinator's own hold it knows itself
  std::vector<float> weights(10);
  uint64_t version = 0;
  REQUIRE(job.client->PushPull(push, Layout(), gradient, &version, absl::MakeSpan(weights)).ok());
  REQUIRE(job.coordinator->pushed.back().step.shard_held_seconds == 0);
  REQUIRE(job.client->Push(push, Layout(), gradient).ok());
  REQUIRE(job.coordinator->pushed.back().step.shard_held_seconds == 0.25);
  REQUIRE(job.shard->pushed.back().step.shard_held_seconds == 0.25);
}

// A push of gradient 1 everywhere through the whole job, unary or streamed; the model after it.
absl::StatusOr<PushReply> PushOnce(Job& job, bool streamed, std::vector<float>* weights) {
  static const std::vector<float> gradient(10, 1.0f);
  PushedStep push;
  push.worker_id = 1;
  weights->assign(10, -7.0f);
  uint64_t version = 0;
  if (!streamed) return job.client->PushPull(push, Layout(), gradient, &version, absl::MakeSpan(*weights));
  auto stream = job.client->StartPushPull(push, Layout(), gradient);
  if (!stream.ok()) return stream.status();
  (*stream)->Send({0, 1});
  absl::StatusOr<PushReply> r =
      (*stream)->FinishEarly(StepEnd{0.1, 1.0, std::nullopt}, &version, absl::MakeSpan(*weights));
  if (!r.ok()) return r;
  if (absl::Status a = (*stream)->AwaitModel(); !a.ok()) return a;
  return r;
}

TEST_CASE("a shard's slice lost on the way is sent again on the same session, and its model pulled",
          "[sharded_client]") {
  const bool streamed = GENERATE(false, true);
  const bool reply_lost = GENERATE(false, true);  // the shard took it, and its reply was lost
  CAPTURE(streamed, reply_lost);
  Job job;
  job.shard->failures = {absl::UnavailableError("Socket closed")};
  job.shard->lose_reply = reply_lost;
  std::vector<float> weights;
  absl::StatusOr<PushReply> r = PushOnce(job, streamed, &weights);
  REQUIRE(r.ok());
  REQUIRE(r->applied);
  REQUIRE(r->resent == "slice 1 (Socket closed)");
  REQUIRE(job.shard->pushed.size() == 2);
  REQUIRE_FALSE(job.shard->pushed[0].resend);
  REQUIRE(job.shard->pushed[1].resend);  // the slice alone, on the same session
  REQUIRE(job.shard->pushed[1].worker_id == 1);
  REQUIRE(job.coordinator->pushed.size() == 1);
  REQUIRE(job.shard->steps == 1);  // taken once
  REQUIRE(job.shard->pulled_at_least == std::vector<uint64_t>{1});
  for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 1);
  // The next push goes as usual.
  r = PushOnce(job, streamed, &weights);
  REQUIRE(r.ok());
  REQUIRE(r->resent.empty());
  REQUIRE(job.shard->pushed.size() == 3);
  REQUIRE_FALSE(job.shard->pushed[2].resend);
  for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 2);
}

TEST_CASE("a resend waits out a first sending the shard still holds, and gives up after kResendFor",
          "[sharded_client]") {
  Job job;
  const absl::Status busy = absl::ResourceExhaustedError("worker 1 has a push in flight already");
  job.shard->failures = {absl::UnavailableError("Socket closed"), busy, busy};
  std::vector<float> weights;
  REQUIRE(PushOnce(job, false, &weights).ok());
  REQUIRE(job.shard->pushed.size() == 4);
  for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 1);
  // The pauses between the sendings were spent on the shard's connection.
  REQUIRE(job.shard->connection_waits == std::vector<absl::Duration>{absl::Milliseconds(100), absl::Milliseconds(200)});
  REQUIRE(job.coordinator->connection_waits.empty());
  REQUIRE_FALSE(job.client->AwaitConnection(absl::Seconds(3)));  // a session's: the coordinator's connection
  REQUIRE(job.coordinator->connection_waits == std::vector<absl::Duration>{absl::Seconds(3)});

  // A shard that stays away: the push fails Unavailable, as before, once kResendFor passed.
  const absl::Time start = job.clock.Now();
  job.shard->failures.assign(1000, absl::UnavailableError("Connection refused"));
  absl::StatusOr<PushReply> r = PushOnce(job, false, &weights);
  REQUIRE(absl::IsUnavailable(r.status()));
  REQUIRE(absl::StrContains(r.status().message(), "sent again"));
  REQUIRE(job.clock.Now() - start >= ShardedPsClient::kResendFor);
  REQUIRE(job.clock.Now() - start < ShardedPsClient::kResendFor + absl::Seconds(2));
  REQUIRE(job.coordinator->heartbeats > 3);  // asked after each sending whether the session still holds
}

TEST_CASE("a slice is not sent again once the coordinator ended the session: the worker joins again",
          "[sharded_client]") {
  Job job;
  std::vector<float> weights;
  // The shard's host is gone for good; the coordinator took its slice elsewhere and ended
  // every session: the next sending is the last.
  job.shard->failures.assign(1000, absl::UnavailableError("Connection refused"));
  job.coordinator->heartbeat = Action::kRejoin;
  const absl::Time start = job.clock.Now();
  absl::StatusOr<PushReply> r = PushOnce(job, false, &weights);
  REQUIRE(absl::IsNotFound(r.status()));
  REQUIRE(absl::StrContains(r.status().message(), "join again"));
  REQUIRE(job.shard->pushed.size() == 2);  // the push, and one sending again
  REQUIRE(job.clock.Now() - start < absl::Seconds(1));
  job.shard->pull_failures.assign(1000, absl::UnavailableError("Connection refused"));
  REQUIRE(absl::IsNotFound(job.client->Pull(1, 1, Layout(), absl::MakeSpan(weights)).status()));
}

TEST_CASE("a shard's pull that fails on the way is made again, whole, without failing the pull", "[sharded_client]") {
  Job job;
  std::vector<float> weights;
  REQUIRE(PushOnce(job, false, &weights).ok());  // the model at version 1 everywhere
  job.coordinator->version = job.shard->version = 2;
  for (float& v : job.coordinator->model) v -= 1;
  for (float& v : job.shard->model) v -= 1;
  job.shard->pull_failures = {absl::UnavailableError("recvmsg:Connection timed out")};
  absl::StatusOr<uint64_t> v = job.client->Pull(1, 1, Layout(), absl::MakeSpan(weights));
  REQUIRE(v.ok());
  REQUIRE(*v == 2);
  REQUIRE(job.shard->pulled_having == std::vector<uint64_t>{1, ~0ull});  // the second pull: whole
  for (int i = 0; i < 10; ++i) REQUIRE(weights[i] == static_cast<float>(i) - 2);
  // One that stays away fails the pull as before, once kResendFor passed.
  job.shard->pull_failures.assign(1000, absl::UnavailableError("Connection refused"));
  v = job.client->Pull(1, 2, Layout(), absl::MakeSpan(weights));
  REQUIRE(absl::IsUnavailable(v.status()));
  REQUIRE(absl::StrContains(v.status().message(), "pulled again"));
}

TEST_CASE("only a lost connection is sent again: a refusal fails the push, and the coordinator's slice is not resent",
          "[sharded_client]") {
  Job job;
  job.shard->failures = {absl::NotFoundError("worker 1 has no session on this shard")};
  std::vector<float> weights;
  REQUIRE(absl::IsNotFound(PushOnce(job, false, &weights).status()));
  REQUIRE(job.shard->pushed.size() == 1);
  job.coordinator->failures = {absl::UnavailableError("Socket closed")};
  REQUIRE(absl::IsUnavailable(PushOnce(job, false, &weights).status()));
  REQUIRE(job.coordinator->pushed.size() == 2);  // one per push, none again
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
