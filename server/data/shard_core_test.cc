#include "server/data/shard_core.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "common/await_state.h"

namespace omnilearn {
namespace server {
namespace {

ModelLayout Slice() { return *ModelLayout::Create({{"w@0", {3}}, {"bn.mean@0", {1}, true}}); }

OptimizerOptions PlainSgd() {
  OptimizerOptions o;
  o.momentum = 0;
  o.weight_decay = 0;
  return o;
}

PushInfo PushOf(WorkerId id, uint64_t version) {
  PushInfo p;
  p.id = id;
  p.batch = 1;
  p.version = version;
  return p;
}

ReplicatedStep StepOf(uint64_t version, std::vector<ReplicatedStep::Member> members, double scale, double lr) {
  ReplicatedStep s;
  s.version = version;
  s.members = std::move(members);
  s.settings.update_scale = scale;
  s.settings.learning_rate = lr;
  return s;
}

// The slice {1, 1, 1, 0} at version 0, with workers 1 and 2's sessions.
void InitTwoMembers(ShardCore& shard) {
  REQUIRE(shard.Init(Slice(), {1, 1, 1, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  shard.OpenSession(2, "b");
}

// Workers 1 and 2 push slices {1, 2, 3, 10} and {3, 2, 1, 20} of version 0, with batches 1
// and `second_batch`.
void PushBoth(ShardCore& shard, int64_t second_batch = 3) {
  PushInfo second = PushOf(2, 0);
  second.batch = second_batch;
  REQUIRE(shard.Push(PushOf(1, 0), {1, 2, 3, 10}, absl::InfinitePast()).ok());
  REQUIRE(shard.Push(second, {3, 2, 1, 20}, absl::InfinitePast()).ok());
}

// Those pushes, and the coordinator's step takes them with weights 1 and 3, mean over 4, at
// rate 0.1: g = (2.5, 2, 1.5), buffer 17.5. The slice's weights after it.
std::vector<float> SteppedWeightedMean(ShardCore& shard, int64_t second_batch) {
  InitTwoMembers(shard);
  PushBoth(shard, second_batch);
  REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}, {2, 0, 3}}, 0.25, 0.1)).ok());
  auto snap = shard.Pull(1, 0, 1, absl::InfinitePast());
  REQUIRE(snap.ok());
  REQUIRE(snap->version == 1);
  const std::vector<float>& w = *snap->weights;
  REQUIRE(w[0] == Approx(1 - 0.25));
  REQUIRE(w[1] == Approx(1 - 0.2));
  REQUIRE(w[2] == Approx(1 - 0.15));
  REQUIRE(w[3] == Approx(17.5));
  return w;
}

TEST_CASE("a slice's hold is its wait for the step's other slices, not the command after them", "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  InitTwoMembers(shard);  // member wait 5 s
  const absl::Time deadline = clock.Now() + absl::Minutes(5);
  absl::StatusOr<PushResult> first, second;
  std::thread a([&] { first = shard.Push(PushOf(1, 0), {1, 2, 3, 10}, deadline); });
  AwaitState([&] { return clock.waiters() == 1; });
  clock.Advance(absl::Seconds(3));  // worker 2's slice comes 3 s after worker 1's
  std::thread b([&] { second = shard.Push(PushOf(2, 0), {3, 2, 1, 20}, deadline); });
  AwaitState([&] { return clock.waiters() == 2; });
  clock.Advance(absl::Seconds(1));  // and the coordinator's command 1 s after that
  REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}, {2, 0, 1}}, 0.5, 0.1)).ok());
  a.join();
  b.join();
  REQUIRE((first.ok() && second.ok()));
  REQUIRE(first->applied);
  REQUIRE(first->held_seconds == Approx(3));  // worker 1 waited for worker 2's slice
  REQUIRE(second->held_seconds == 0);         // worker 2 waited for nobody
}

TEST_CASE("a shard replays the coordinator's step: weighted mean of the members' slices, the step's rate",
          "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  (void)SteppedWeightedMean(shard, 1);
  const std::string m = shard.registry().Serialize();
  REQUIRE(m.find("omnilearn_shard_model_version 1\n") != std::string::npos);
  REQUIRE(m.find("omnilearn_shard_slice_bytes 16\n") != std::string::npos);
  REQUIRE(m.find("omnilearn_shard_step_seconds_count 1\n") != std::string::npos);
  REQUIRE(m.find("omnilearn_shard_slices_left_out_total 0\n") != std::string::npos);
  // The second member's weight (3) is not its push's batch (1): the step summed the slices itself.
  REQUIRE(m.find("omnilearn_shard_steps_summed_on_arrival_total 0\n") != std::string::npos);
}

TEST_CASE("sync: the slices are summed as they arrive, weighted by their batches, and the step takes that sum",
          "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  const std::vector<float> w = SteppedWeightedMean(shard, 3);  // the same mean
  REQUIRE(absl::StrContains(shard.registry().Serialize(), "omnilearn_shard_steps_summed_on_arrival_total 1\n"));
  // The next version's slices start a new sum.
  REQUIRE(shard.Push(PushOf(1, 1), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  REQUIRE(shard.Push(PushOf(2, 1), {2, 2, 2, 2}, absl::InfinitePast()).ok());
  REQUIRE(shard.Step(StepOf(1, {{1, 1, 1}, {2, 1, 1}}, 0.5, 0.1)).ok());
  REQUIRE(shard.Pull(1, 1, 2, absl::InfinitePast())->weights->at(0) == Approx(w[0] - 0.1 * 1.5));
  REQUIRE(absl::StrContains(shard.registry().Serialize(), "omnilearn_shard_steps_summed_on_arrival_total 2\n"));
}

// The step command's wait for the slices, or theirs for it: the metric counts only the
// time the slices were all here before the command.
TEST_CASE("a step records how long its members' slices were in before the coordinator's command",
          "[shard_core][clock]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.StepWaitSummary() == "no step took a slice at the coordinator's command");
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  shard.OpenSession(2, "b");
  REQUIRE(shard.Push(PushOf(1, 0), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  clock.Advance(absl::Milliseconds(10));
  REQUIRE(shard.Push(PushOf(2, 0), {1, 1, 1, 1}, absl::InfinitePast()).ok());  // the last slice
  clock.Advance(absl::Milliseconds(30));
  REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}, {2, 0, 1}}, 0.5, 0.1)).ok());
  // The command first: it waits 20 ms for worker 2's slice, which counts 0.
  REQUIRE(shard.Push(PushOf(1, 1), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  std::thread control([&] { REQUIRE(shard.Step(StepOf(1, {{1, 1, 1}, {2, 1, 1}}, 0.5, 0.1)).ok()); });
  AwaitState([&] { return clock.waiters() > 0; });
  clock.Advance(absl::Milliseconds(20));
  REQUIRE(shard.Push(PushOf(2, 1), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  control.join();
  REQUIRE(shard.version() == 2);
  const std::string m = shard.registry().Serialize();
  REQUIRE(absl::StrContains(m, "omnilearn_shard_step_command_wait_seconds_count 2\n"));
  REQUIRE(absl::StrContains(m, "omnilearn_shard_step_command_wait_seconds_sum 0.03\n"));
  REQUIRE(shard.StepWaitSummary() ==
          "2 steps took slices, which were in 15.0 ms on average before the coordinator's command");
}

// --shard_steps_ahead: workers 1 and 2 (batches 1 and 3) in the round from version 0 at
// rate 0.1, decided ahead.
RoundAhead RoundOf12() {
  RoundAhead r;
  r.version = 0;
  r.members = {1, 2};
  r.learning_rate = 0.1;
  return r;
}

TEST_CASE("a round decided ahead: the slice steps when its members' slices are in, and the command confirms it",
          "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  InitTwoMembers(shard);
  shard.ExpectRound(RoundOf12());
  REQUIRE(shard.version() == 0);
  PushBoth(shard);  // the last slice's push steps the slice, before any command
  REQUIRE(shard.version() == 1);
  // Until the command comes, a checkpoint of version 0 is still the slice before the step.
  REQUIRE(shard.CaptureAt(0)->version == 0);
  REQUIRE(*shard.CaptureAt(0)->weights == std::vector<float>{1, 1, 1, 0});
  REQUIRE(shard.CaptureAt(1)->version == 1);
  auto snap = shard.Pull(1, 0, 1, absl::InfinitePast());
  REQUIRE(snap.ok());
  REQUIRE((*snap->weights)[0] == Approx(1 - 0.25));  // the weighted mean, as the command's step takes it
  REQUIRE((*snap->weights)[3] == Approx(17.5));
  REQUIRE(snap->history == ExtendHistory(0, 0, {{1, 0, 1}, {2, 0, 3}}));
  // The coordinator's command for it, members in its order: confirmed, nothing stepped again.
  REQUIRE(shard.Step(StepOf(0, {{2, 0, 3}, {1, 0, 1}}, 0.25, 0.1)).ok());
  REQUIRE(shard.version() == 1);
  REQUIRE(absl::IsAborted(shard.CaptureAt(0).status()));  // the shard registers again
  REQUIRE(shard.Pull(1, 0, 1, absl::InfinitePast())->weights->at(0) == Approx(1 - 0.25));
  const std::string m = shard.registry().Serialize();
  REQUIRE(absl::StrContains(m, "omnilearn_shard_steps_ahead_total 1\n"));
  REQUIRE(absl::StrContains(m, "omnilearn_shard_steps_ahead_refused_total 0\n"));
  REQUIRE(absl::StrContains(m, "omnilearn_shard_step_command_wait_seconds_count 0\n"));
  REQUIRE(shard.StepWaitSummary() == "no step took a slice at the coordinator's command; 1 were taken ahead of it");
  // The next round, not decided ahead: the command steps it.
  REQUIRE(shard.Push(PushOf(1, 1), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  REQUIRE(shard.version() == 1);
  REQUIRE(shard.Step(StepOf(1, {{1, 1, 1}}, 1, 0.1)).ok());
  REQUIRE(shard.version() == 2);
}

TEST_CASE("a round decided ahead after its slices came steps at once; one missing a member waits for the command",
          "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  InitTwoMembers(shard);
  PushBoth(shard);
  shard.ExpectRound(RoundOf12());
  REQUIRE(shard.version() == 1);
  REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}, {2, 0, 3}}, 0.25, 0.1)).ok());
  // Version 1's round names worker 3, whose slice never comes here: no step until the command.
  shard.OpenSession(3, "c");
  RoundAhead next = RoundOf12();
  next.version = 1;
  next.members = {1, 2, 3};
  shard.ExpectRound(next);
  REQUIRE(shard.Push(PushOf(1, 1), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  REQUIRE(shard.Push(PushOf(2, 1), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  REQUIRE(shard.version() == 1);
  REQUIRE(shard.Step(StepOf(1, {{1, 1, 1}, {2, 1, 1}}, 0.5, 0.1)).ok());  // worker 3 dropped at the coordinator
  REQUIRE(shard.version() == 2);
  // A round decided for another version than the slice's is not kept.
  next.version = 5;
  shard.ExpectRound(next);
  REQUIRE(shard.Push(PushOf(1, 2), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  REQUIRE(shard.Push(PushOf(2, 2), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  REQUIRE(shard.version() == 2);
}

TEST_CASE("a step taken ahead that the coordinator's command does not confirm fails Aborted", "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  InitTwoMembers(shard);
  shard.ExpectRound(RoundOf12());
  PushBoth(shard);
  REQUIRE(shard.version() == 1);
  // The coordinator dropped worker 2 (its slice to the coordinator did not come in time).
  const absl::Status s = shard.Step(StepOf(0, {{1, 0, 1}}, 1, 0.1));
  REQUIRE(s.code() == absl::StatusCode::kAborted);
  REQUIRE(absl::StrContains(s.message(),
                            "took worker(s) 1 (weight 1) at rate 0.1, and this slice stepped ahead "
                            "with 1 (weight 1), 2 (weight 3)"));
  REQUIRE(absl::StrContains(shard.registry().Serialize(), "omnilearn_shard_steps_ahead_refused_total 1\n"));
}

TEST_CASE("the command before a round's last slice takes the step itself, and async takes no round ahead",
          "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  InitTwoMembers(shard);
  shard.ExpectRound(RoundOf12());
  REQUIRE(shard.Push(PushOf(1, 0), {1, 2, 3, 10}, absl::InfinitePast()).ok());
  std::thread control([&] { REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}, {2, 0, 3}}, 0.25, 0.1)).ok()); });
  AwaitState([&] { return clock.waiters() > 0; });  // the command waits for worker 2's slice
  PushInfo second = PushOf(2, 0);
  second.batch = 3;
  REQUIRE(shard.Push(second, {3, 2, 1, 20}, absl::InfinitePast()).ok());
  control.join();
  REQUIRE(shard.version() == 1);
  REQUIRE(absl::StrContains(shard.registry().Serialize(), "omnilearn_shard_steps_ahead_total 0\n"));

  ShardCore async({&clock, nullptr});
  REQUIRE(async.Init(Slice(), {1, 1, 1, 0}, 0, PlainSgd(), absl::Seconds(5), /*sync=*/false).ok());
  async.OpenSession(1, "a");
  RoundAhead only1 = RoundOf12();
  only1.members = {1};
  async.ExpectRound(only1);
  REQUIRE(async.Push(PushOf(1, 0), {1, 2, 3, 10}, absl::InfinitePast()).ok());
  REQUIRE(async.version() == 0);
}

TEST_CASE("a step that predicts serves its slice stepped ahead; the parameters only", "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {1, 1, 1, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  REQUIRE(shard.Push(PushOf(1, 0), {1, 2, 3, 10}, absl::InfinitePast()).ok());
  ReplicatedStep step = StepOf(0, {{1, 0, 1}}, 1, 0.1);
  step.predict_steps = 2;
  REQUIRE(shard.Step(step).ok());
  auto snap = shard.Pull(1, 0, 1, absl::InfinitePast());
  REQUIRE(snap.ok());
  REQUIRE(snap->version == 1);
  const std::vector<float>& w = *snap->weights;
  REQUIRE(w[0] == Approx(1 - 3 * 0.1));  // stepped to 0.9, then twice that step ahead
  REQUIRE(w[1] == Approx(1 - 3 * 0.2));
  REQUIRE(w[2] == Approx(1 - 3 * 0.3));
  REQUIRE(w[3] == Approx(10));  // the buffer as it is
}

TEST_CASE("a clipped job's shard scales its step by the whole model's norm, reduced with the coordinator",
          "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  OptimizerOptions clipped = PlainSgd();
  clipped.clip_grad_norm = 5;
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 0, clipped, absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  // Without a way to the coordinator's norm a clipped step cannot be taken.
  REQUIRE(shard.Push(PushOf(1, 0), {3, 4, 0, 7}, absl::InfinitePast()).ok());
  REQUIRE(absl::IsFailedPrecondition(shard.Step(StepOf(0, {{1, 0, 1}}, 1, 1))));
  REQUIRE(shard.version() == 0);
  // The slice's update (3, 4, 0) has squared norm 25 (the buffer is not a gradient); the
  // other slices bring 75: the whole update's norm is 10, so the step is scaled by 5/10.
  std::vector<std::pair<uint64_t, double>> asked;
  shard.SetNormReduction([&asked](uint64_t version, double sum_squares) -> absl::StatusOr<double> {
    asked.emplace_back(version, sum_squares);
    return sum_squares + 75;
  });
  REQUIRE(shard.Push(PushOf(1, 0), {3, 4, 0, 7}, absl::InfinitePast()).ok());
  REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}}, 1, 1)).ok());
  REQUIRE(asked == std::vector<std::pair<uint64_t, double>>{{0, 25.0}});
  auto snap = shard.Pull(1, 0, 1, absl::InfinitePast());
  REQUIRE(snap.ok());
  REQUIRE((*snap->weights)[0] == Approx(-1.5));
  REQUIRE((*snap->weights)[1] == Approx(-2));
  REQUIRE((*snap->weights)[2] == Approx(0));
  REQUIRE((*snap->weights)[3] == Approx(7));  // a buffer takes the values, not clipped
  // Within the clip: no scaling. A reduction's error fails the step (the link ends).
  REQUIRE(shard.Push(PushOf(1, 1), {0.3f, 0.4f, 0, 7}, absl::InfinitePast()).ok());
  asked.clear();
  shard.SetNormReduction([&asked](uint64_t version, double sum_squares) -> absl::StatusOr<double> {
    asked.emplace_back(version, sum_squares);
    return sum_squares;
  });
  REQUIRE(shard.Step(StepOf(1, {{1, 1, 1}}, 1, 1)).ok());
  REQUIRE(asked.size() == 1);
  REQUIRE(asked[0].second == Approx(0.25));
  snap = shard.Pull(1, 1, 2, absl::InfinitePast());
  REQUIRE((*snap->weights)[0] == Approx(-1.8));
  shard.SetNormReduction(
      [](uint64_t, double) -> absl::StatusOr<double> { return absl::FailedPreconditionError("came too late"); });
  REQUIRE(shard.Push(PushOf(1, 2), {1, 1, 1, 7}, absl::InfinitePast()).ok());
  const absl::Status failed = shard.Step(StepOf(2, {{1, 2, 1}}, 1, 1));
  REQUIRE(absl::IsAborted(failed));  // the link registers again: the job goes back to a checkpoint
  REQUIRE(absl::StrContains(failed.message(), "came too late"));
  REQUIRE(shard.version() == 2);
}

TEST_CASE("a step waits for a member's slice, and a step from another version is refused", "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  std::thread control([&] { REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}}, 1, 1)).ok()); });
  REQUIRE(shard.version() == 0);  // waiting for worker 1's slice
  REQUIRE(shard.Push(PushOf(1, 0), {1, 1, 1, 1}, absl::InfinitePast()).ok());
  control.join();
  REQUIRE(shard.version() == 1);
  REQUIRE(absl::IsAborted(shard.Step(StepOf(0, {}, 1, 1))));  // replayed: the shard registers again
}

TEST_CASE("sync: a slice of a version the shard has stepped past is answered at once, not held", "[shard_core]") {
  FakeClock clock;  // never advanced: a held push would wait for ever
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  shard.OpenSession(2, "b");
  REQUIRE(shard.Step(StepOf(0, {}, 1, 1)).ok());  // version 0's round went on without them
  std::future<absl::StatusOr<PushResult>> late = std::async(std::launch::async, [&] {
    return shard.Push(PushOf(1, 0), {1, 1, 1, 1}, absl::InfiniteFuture());
  });
  const bool answered = late.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!answered) clock.Advance(absl::Seconds(10));  // let the held call end before failing
  REQUIRE(answered);
  absl::StatusOr<PushResult> r = late.get();
  REQUIRE(r.ok());
  REQUIRE_FALSE(r->applied);
  REQUIRE(r->version == 1);
  // A slice of the current version is still held until a step takes it.
  std::thread control([&] { REQUIRE(shard.Step(StepOf(1, {{2, 1, 1}}, 1, 1)).ok()); });
  REQUIRE(shard.Push(PushOf(2, 1), {1, 1, 1, 1}, absl::InfiniteFuture())->applied);
  control.join();
}

TEST_CASE("a resent slice that a step took already is answered applied, not taken twice", "[shard_core]") {
  const bool sync = GENERATE(true, false);
  CAPTURE(sync);
  FakeClock clock;  // never advanced: every push below is answered without waiting
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {1, 1, 1, 0}, 0, PlainSgd(), absl::Seconds(5), sync).ok());
  shard.OpenSession(1, "a");
  REQUIRE(shard.Push(PushOf(1, 0), {1, 2, 3, 0}, absl::InfinitePast()).ok());  // its reply lost
  REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}}, 1, 0.5)).ok());
  PushInfo again = PushOf(1, 0);
  again.resend = true;
  // Without the rule it would be held for a step to take again (async) until member_wait.
  std::future<absl::StatusOr<PushResult>> resent = std::async(std::launch::async, [&] {
    return shard.Push(again, {1, 2, 3, 0}, absl::InfiniteFuture());
  });
  const bool answered = resent.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!answered) clock.Advance(absl::Seconds(10));  // let the held call end before failing
  REQUIRE(answered);
  absl::StatusOr<PushResult> r = resent.get();
  REQUIRE(r.ok());
  REQUIRE(r->applied);
  REQUIRE(r->version == 1);
  const std::vector<float> w = *shard.Pull(1, 0, 1, absl::InfinitePast())->weights;
  REQUIRE(w[0] == Approx(0.5));
  REQUIRE(w[1] == Approx(0));
  REQUIRE(w[2] == Approx(-0.5));
  // The same slice not marked as resent is an ordinary push: sync, of a round stepped past;
  // async, held for a step to take.
  if (sync) {
    r = shard.Push(PushOf(1, 0), {1, 2, 3, 0}, absl::InfiniteFuture());
    REQUIRE(r.ok());
    REQUIRE_FALSE(r->applied);
  }
}

TEST_CASE("a resent slice that no step took yet is held and taken as a first sending is", "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {1, 1, 1, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  PushInfo again = PushOf(1, 0);
  again.resend = true;  // the first sending never arrived
  std::thread control([&] { REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}}, 1, 0.5)).ok()); });
  absl::StatusOr<PushResult> r = shard.Push(again, {1, 2, 3, 0}, absl::InfiniteFuture());
  control.join();
  REQUIRE(r.ok());
  REQUIRE(r->applied);
  REQUIRE((*shard.Pull(1, 0, 1, absl::InfinitePast())->weights)[0] == Approx(0.5));
}

TEST_CASE("a slice that claims a version from the future is refused at once, as the coordinator refuses it",
          "[shard_core]") {
  FakeClock clock;  // never advanced: a held push would wait for ever
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 3, PlainSgd(), absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  std::future<absl::StatusOr<PushResult>> future = std::async(std::launch::async, [&] {
    return shard.Push(PushOf(1, 4), {1, 1, 1, 1}, absl::InfiniteFuture());
  });
  const bool answered = future.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!answered) clock.Advance(absl::Seconds(10));  // let the held call end before failing
  REQUIRE(answered);
  const absl::StatusOr<PushResult> r = future.get();
  REQUIRE(absl::IsInvalidArgument(r.status()));
  REQUIRE(r.status().message() == "model version 4 is newer than the server's 3");
  REQUIRE(shard.version() == 3);
}

TEST_CASE("sync: a step whose member's slice never came is not taken here; the member is dropped", "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  shard.OpenSession(2, "b");
  std::future<absl::StatusOr<PushResult>> pushed = std::async(std::launch::async, [&] {
    return shard.Push(PushOf(1, 0), {2, 2, 2, 4}, absl::InfiniteFuture());
  });
  absl::Status stepped;
  std::atomic<bool> done{false};
  std::thread control([&] {
    stepped = shard.Step(StepOf(0, {{1, 0, 1}, {2, 0, 1}}, 0.5, 1));
    done = true;
  });
  // The fake clock moves a second at a time until the step gave up waiting for worker 2.
  const bool ended = AwaitState(
      [&] {
        clock.Advance(absl::Seconds(1));
        return done.load();
      },
      absl::Seconds(30));
  control.join();
  REQUIRE(ended);
  REQUIRE(shard.registry().Serialize().find("omnilearn_shard_slices_left_out_total 1\n") != std::string::npos);
  // The coordinator's slice took worker 2's gradient: this slice does not step without it.
  REQUIRE(absl::IsAborted(stepped));
  REQUIRE(absl::StrContains(stepped.message(), "worker(s) 2 did not come"));
  REQUIRE(shard.version() == 0);
  REQUIRE(*shard.Capture()->weights == std::vector<float>{0, 0, 0, 0});
  clock.Advance(absl::Seconds(10));  // worker 1's held push ends, not taken
  REQUIRE_FALSE(pushed.get()->applied);
  REQUIRE(absl::IsNotFound(shard.Push(PushOf(2, 0), {1, 1, 1, 1}, absl::InfinitePast()).status()));  // joins again
}

TEST_CASE("async: a member whose slice never comes is left out after the wait, the version moves, and it is dropped",
          "[shard_core]") {
  FakeClock clock;
  std::vector<std::string> log;
  ShardCore shard({&clock, [&](const std::string& l) { log.push_back(l); }});
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 0, PlainSgd(), absl::Seconds(5), /*sync=*/false).ok());
  shard.OpenSession(1, "a");
  shard.OpenSession(2, "b");
  REQUIRE(shard.Push(PushOf(1, 0), {2, 2, 2, 4}, absl::InfinitePast()).ok());
  std::thread control([&] { REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}, {2, 0, 1}}, 0.5, 1)).ok()); });
  while (shard.version() == 0) clock.Advance(absl::Seconds(1));
  control.join();
  auto snap = shard.Pull(1, 0, 1, absl::InfinitePast());
  REQUIRE(snap.ok());
  REQUIRE((*snap->weights)[0] == Approx(-2));  // worker 1's alone, its weight renormalized
  REQUIRE((*snap->weights)[3] == Approx(4));
  // The slice's history holds the members it took: worker 1 alone, not the step's two.
  REQUIRE(snap->history == ExtendHistory(0, 0, {{1, 0, 1}}));
  REQUIRE(log.size() == 1);
  REQUIRE(shard.registry().Serialize().find("omnilearn_shard_slices_left_out_total 1\n") != std::string::npos);
  // Worker 2 pushed its other slices (the coordinator keeps it in its rounds) but never
  // this one: its session ended here, so the next step does not wait for it, and its
  // calls are told to join again.
  REQUIRE(shard.Push(PushOf(1, 1), {2, 2, 2, 4}, absl::InfinitePast()).ok());
  REQUIRE(shard.Step(StepOf(1, {{1, 1, 1}, {2, 1, 1}}, 0.5, 1)).ok());  // at once: no clock advance
  REQUIRE(shard.version() == 2);
  REQUIRE(absl::IsNotFound(shard.Push(PushOf(2, 2), {1, 1, 1, 1}, absl::InfinitePast()).status()));
  REQUIRE(shard.registry().Serialize().find("omnilearn_shard_slices_left_out_total 2\n") != std::string::npos);
}

TEST_CASE("only announced sessions push and pull, with their secret", "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  REQUIRE(absl::IsNotFound(shard.Push(PushOf(7, 0), {1, 1, 1, 1}, absl::InfinitePast()).status()));
  PushInfo report = PushOf(7, 0);
  report.report_only = true;  // an unknown session's report is no more welcome than its gradient
  REQUIRE(absl::IsNotFound(shard.Push(report, {}, absl::InfinitePast()).status()));
  report.report_only = false;
  report.out_of_memory = true;
  REQUIRE(absl::IsNotFound(shard.Push(report, {}, absl::InfinitePast()).status()));
  shard.OpenSession(7, "s");
  REQUIRE(absl::IsPermissionDenied(shard.Authenticate(7, "x")));
  REQUIRE(shard.Authenticate(7, "s").ok());
  REQUIRE(absl::IsInvalidArgument(shard.Push(PushOf(7, 0), {1, 1}, absl::InfinitePast()).status()));
  REQUIRE(absl::IsInvalidArgument(
      shard.Push(PushOf(7, 0), {1, std::numeric_limits<float>::quiet_NaN(), 1, 1}, absl::InfinitePast()).status()));
  REQUIRE(absl::IsDeadlineExceeded(shard.Pull(7, 0, 3, absl::InfinitePast()).status()));
  shard.CloseSession(7);
  REQUIRE(absl::IsNotFound(shard.Pull(7, 0, 0, absl::InfinitePast()).status()));
}

TEST_CASE("a worker's first call may come before the coordinator's announcement of its session", "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  REQUIRE(shard.Init(Slice(), {0, 0, 0, 0}, 0, PlainSgd(), absl::Seconds(5)).ok());
  absl::Status early;
  std::thread call([&] { early = shard.Authenticate(7, "s"); });
  REQUIRE(AwaitState([&] { return clock.waiters() > 0; }));  // it waits for the announcement...
  shard.OpenSession(7, "s");                                 // ...which comes
  call.join();
  REQUIRE(early.ok());
  std::thread wrong([&] { early = shard.Authenticate(8, "t"); });
  REQUIRE(AwaitState([&] { return clock.waiters() > 0; }));
  shard.OpenSession(8, "other");  // the secret is checked against the announced session
  wrong.join();
  REQUIRE(absl::IsPermissionDenied(early));
  // Never announced: after the wait the call is refused at its header, report-only too.
  std::thread never([&] { early = shard.Authenticate(9, "u"); });
  REQUIRE(AwaitState([&] { return clock.waiters() > 0; }));
  clock.Advance(ShardCore::kAnnouncementWait);
  never.join();
  REQUIRE(absl::IsNotFound(early));
  REQUIRE(absl::IsNotFound(shard.Push(PushOf(9, 0), {1, 1, 1, 1}, absl::InfinitePast()).status()));
}

TEST_CASE("a shard's slice goes back to its checkpoint: weights, optimizer state, version; sessions end",
          "[shard_core]") {
  FakeClock clock;
  ShardCore shard({&clock, nullptr});
  OptimizerOptions momentum = PlainSgd();
  momentum.momentum = 0.9;
  REQUIRE(absl::IsFailedPrecondition(shard.Capture().status()));
  REQUIRE(shard.Init(Slice(), {1, 1, 1, 0}, 0, momentum, absl::Seconds(5)).ok());
  shard.OpenSession(1, "a");
  REQUIRE(shard.Push(PushOf(1, 0), {1, 1, 1, 5}, absl::InfinitePast()).ok());
  REQUIRE(shard.Step(StepOf(0, {{1, 0, 1}}, 1, 0.1)).ok());
  const CheckpointState at1 = *shard.Capture();
  REQUIRE(at1.version == 1);
  REQUIRE(at1.layout == Slice());
  REQUIRE(at1.optimizer_state.size() == 1);
  REQUIRE(shard.Push(PushOf(1, 1), {1, 1, 1, 5}, absl::InfinitePast()).ok());
  REQUIRE(shard.Step(StepOf(1, {{1, 1, 1}}, 1, 0.1)).ok());
  const std::vector<float> at2 = *shard.Pull(1, 0, 2, absl::InfinitePast())->weights;

  REQUIRE(shard.Restore(Slice(), at1, momentum, absl::Seconds(5), true).ok());
  REQUIRE(shard.version() == 1);
  REQUIRE(absl::IsNotFound(shard.Pull(1, 0, 1, absl::InfinitePast()).status()));  // the workers join again
  shard.OpenSession(1, "a");
  REQUIRE(*shard.Pull(1, 0, 1, absl::InfinitePast())->weights == *at1.weights);
  // The same step again reaches the same slice: the momentum came back too.
  REQUIRE(shard.Push(PushOf(1, 1), {1, 1, 1, 5}, absl::InfinitePast()).ok());
  REQUIRE(shard.Step(StepOf(1, {{1, 1, 1}}, 1, 0.1)).ok());
  REQUIRE(*shard.Pull(1, 0, 2, absl::InfinitePast())->weights == at2);

  // A pull waiting for a version the coordinator answered before it was lost: the slice goes
  // back to a checkpoint below it, and the pull is told at once to join again (it waited
  // until its deadline, 600 s by default, and the job stalled).
  absl::StatusOr<ModelSnapshot> waiting;
  std::thread puller([&] { waiting = shard.Pull(1, 0, 3, absl::InfiniteFuture()); });
  REQUIRE(AwaitState([&] { return clock.waiters() > 0; }));
  REQUIRE(shard.Restore(Slice(), at1, momentum, absl::Seconds(5), true).ok());
  puller.join();
  REQUIRE(absl::IsNotFound(waiting.status()));

  CheckpointState other = at1;
  other.layout = *ModelLayout::Create({{"w@0", {4}}});
  REQUIRE(absl::IsInvalidArgument(shard.Restore(Slice(), other, momentum, absl::Seconds(5), true)));
  REQUIRE(absl::IsInvalidArgument(shard.Restore(
      Slice(), at1,
      [] {
        OptimizerOptions adam;
        adam.kind = OptimizerKind::kAdam;
        return adam;
      }(),
      absl::Seconds(5), true)));
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
