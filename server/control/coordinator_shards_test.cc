#include "server/control/coordinator_shards.h"

#include <cmath>
#include <numeric>
#include <thread>
#include <variant>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "catch2/catch.hpp"
#include "common/await_state.h"

namespace omnilearn {
namespace server {
namespace {

constexpr int64_t kPartition = 64;  // 16 floats: the test model is cut into 4 partitions

ModelLayout Model() { return *ModelLayout::Create({{"a", {32}}, {"b", {32}}}); }

CoordinatorShardsOptions Options(int shards) {
  CoordinatorShardsOptions o;
  o.shards = shards;
  o.partition_bytes = kPartition;
  o.address = "coordinator:1";
  return o;
}

CoordinatorShards Make(int shards) { return CoordinatorShards(Options(shards)); }

ShardRegistration Hello(const std::string& address, int index = 0, int shards = 3) {
  ShardRegistration h;
  h.address = address;
  h.shards = static_cast<uint64_t>(shards);
  h.partition_bytes = kPartition;
  h.index = static_cast<uint64_t>(index);
  return h;
}

// An outgoing command of one kind (the test fails on another).
template <typename Command>
const Command& As(const CoordinatorShards::Outgoing& o) {
  REQUIRE(std::holds_alternative<Command>(o.command));
  return std::get<Command>(o.command);
}
const ShardInitCommand& InitOf(const CoordinatorShards::Outgoing& o) { return As<ShardInitCommand>(o); }
const ShardSessionCommand& SessionOf(const CoordinatorShards::Outgoing& o) { return As<ShardSessionCommand>(o); }

// The commands queued for shard `index`, without waiting.
std::vector<CoordinatorShards::Outgoing> Drain(CoordinatorShards& c, int index) {
  std::vector<CoordinatorShards::Outgoing> out;
  CoordinatorShards::Outgoing o;
  const uint64_t current = c.generation(index);
  while (c.Next(index, current, &o, absl::InfinitePast()).ok() && !std::holds_alternative<std::monostate>(o.command)) {
    out.push_back(o);
  }
  return out;
}

// The coordinator adopts a joiner's model 0, 1, 2, ... (the shards' slices are cut from it).
void Adopt(CoordinatorShards& c) {
  auto values = std::make_shared<std::vector<float>>(Model().total_elements());
  std::iota(values->begin(), values->end(), 0.0f);
  absl::StatusOr<ShardMap> map = c.PlanFor(Model());
  REQUIRE(map.ok());
  c.StashInitial("w0", Model(), *std::move(map), values);
  c.Hooks().model_adopted("w0");
}

TEST_CASE("the Join answer's map: the slices' addresses, and the order pushes take", "[coordinator_shards]") {
  for (bool ordered : {false, true}) {
    CoordinatorShardsOptions o = Options(3);
    o.push_in_order = ordered;
    CoordinatorShards c(o);
    REQUIRE(*c.Register(Hello("s:1", 1)) == 1);
    REQUIRE(*c.Register(Hello("s:2", 2)) == 2);
    const ShardMap map = *ShardMap::Plan(Model(), 3, kPartition);
    const ShardMapAnswer out = c.Answer(map);
    REQUIRE(out.shards == 3);
    REQUIRE(out.partition_bytes == kPartition);
    REQUIRE(out.fingerprint == map.fingerprint());
    REQUIRE(out.addresses == std::vector<std::string>{"coordinator:1", "s:1", "s:2"});
    REQUIRE(out.push_in_order == ordered);
  }
}

TEST_CASE("shard registration: the job's shape, free slices, and no slice after the first step",
          "[coordinator_shards]") {
  CoordinatorShards c = Make(3);
  auto wrong = c.Register(Hello("s:1", 0, 4));
  REQUIRE(absl::IsFailedPrecondition(wrong.status()));
  REQUIRE(absl::StrContains(wrong.status().message(), "--shards"));
  REQUIRE(absl::IsInvalidArgument(c.Register(Hello("", 0)).status()));
  REQUIRE(*c.Register(Hello("s:2", 2)) == 2);
  REQUIRE(*c.Register(Hello("s:1", 0)) == 1);                                 // the free one
  REQUIRE(absl::IsUnavailable(c.Register(Hello("s:x", 1)).status()));         // its holder is connected
  REQUIRE(absl::IsFailedPrecondition(c.Register(Hello("s:x", 3)).status()));  // no such slice
  REQUIRE(absl::IsFailedPrecondition(c.Register(Hello("s:y", 0)).status()));  // every slice taken
  REQUIRE(c.AwaitShards(absl::InfinitePast()).ok());
  c.Disconnect(2);
  auto missing = c.AwaitShards(absl::InfinitePast());
  REQUIRE(absl::IsUnavailable(missing));
  REQUIRE(absl::StrContains(missing.message(), "2"));
  REQUIRE(*c.Register(Hello("s:2b", 2)) == 2);  // before any step a slice can be taken again
  Adopt(c);
  c.Hooks().step(ReplicatedStep{});
  c.Disconnect(1);
  auto late = c.Register(Hello("s:1b", 1));  // without checkpoints its slice's training is lost
  REQUIRE(absl::IsFailedPrecondition(late.status()));
  REQUIRE(absl::StrContains(late.status().message(), "--checkpoint_dir"));
}

TEST_CASE("a shard's init carries the job's optimizer: the flags', then the one the core adopted or restored",
          "[coordinator_shards]") {
  CoordinatorShards c = Make(3);
  Adopt(c);
  REQUIRE(*c.Register(Hello("s:1", 1)) == 1);
  REQUIRE(InitOf(Drain(c, 1).at(0)).optimizer.kind == OptimizerKind::kSgd);  // the flags'
  OptimizerOptions nadam;
  nadam.kind = OptimizerKind::kNAdam;
  nadam.groups = {{{0}, 0.01, 0, {}, {"a"}}, {{1}, 0.02, 0, {}, {"b"}}};
  c.Hooks().optimizer(nadam);  // a worker's, as the core adopts its model
  Adopt(c);
  const ShardInitCommand init = InitOf(Drain(c, 1).at(0));
  REQUIRE(init.optimizer.kind == OptimizerKind::kNAdam);
  REQUIRE(init.optimizer.groups.size() == 2);
  REQUIRE(init.optimizer.groups[1].names == std::vector<std::string>{"b"});
}

TEST_CASE("a shard's stream: its slice of the adopted model, then sessions and steps in the core's order",
          "[coordinator_shards]") {
  CoordinatorShards c = Make(3);
  c.Hooks().session_opened(7, "secret");
  Adopt(c);
  REQUIRE(*c.Register(Hello("s:1", 1)) == 1);  // late: the slice and the open session are replayed
  ReplicatedStep step;
  step.version = 0;
  step.members = {{7, 0, 2.0}};
  step.settings.update_scale = 0.5;
  step.settings.learning_rate = 0.1;
  c.Hooks().step(step);
  c.Hooks().session_closed(7);

  const ShardMap map = *ShardMap::Plan(Model(), 3, kPartition);
  std::vector<CoordinatorShards::Outgoing> out = Drain(c, 1);
  REQUIRE(out.size() == 4);
  REQUIRE(std::holds_alternative<ShardInitCommand>(out[0].command));
  REQUIRE(InitOf(out[0]).index == 1);
  REQUIRE(InitOf(out[0]).fingerprint == map.fingerprint());
  std::vector<float> all(Model().total_elements());
  std::iota(all.begin(), all.end(), 0.0f);
  std::vector<float> slice(map.slice_elements(1));
  map.Gather(1, all, absl::MakeSpan(slice));
  REQUIRE(*out[0].values == slice);
  REQUIRE(SessionOf(out[1]).id == 7);
  REQUIRE(SessionOf(out[1]).secret == "secret");
  REQUIRE(As<ReplicatedStep>(out[2]).members.at(0).weight == 2.0);
  REQUIRE(As<ReplicatedStep>(out[2]).settings.learning_rate == 0.1);
  REQUIRE(SessionOf(out[3]).closed);

  std::vector<CoordinatorShards::ShardInfo> info = c.Shards();
  REQUIRE(info.size() == 2);
  REQUIRE(info[0].connected);
  REQUIRE(info[0].steps_sent == 1);
  REQUIRE(info[0].queued == 0);
  REQUIRE(info[0].slice_bytes == map.slice_elements(1) * 4);
  REQUIRE_FALSE(info[1].connected);

  metrics::Registry registry;
  c.ExportMetrics(registry);
  const std::string m = registry.Serialize();
  REQUIRE(absl::StrContains(m, "omnilearn_coordinator_shard_connected{shard=\"1\"} 1\n"));
  REQUIRE(absl::StrContains(m, "omnilearn_coordinator_shard_connected{shard=\"2\"} 0\n"));
  REQUIRE(absl::StrContains(m, "omnilearn_coordinator_shard_steps_sent{shard=\"1\"} 1\n"));
}

TEST_CASE("a replaced shard's old stream ends", "[coordinator_shards]") {
  CoordinatorShards c = Make(2);
  uint64_t old = 0, now = 0;
  REQUIRE(*c.Register(Hello("s:1", 1, 2), &old) == 1);
  c.Disconnect(1);
  REQUIRE(*c.Register(Hello("s:1b", 1, 2), &now) == 1);
  CoordinatorShards::Outgoing o;
  REQUIRE(absl::IsCancelled(c.Next(1, old, &o, absl::InfinitePast())));  // the old stream ends
  REQUIRE(c.Next(1, now, &o, absl::InfinitePast()).ok());                // the new stream: nothing queued yet
  c.Shutdown();
  REQUIRE(absl::IsCancelled(c.Next(1, now, &o, absl::InfinitePast())));
}

ShardRegistration HelloHolding(const std::string& address, int index, std::vector<uint64_t> versions, int shards = 3) {
  ShardRegistration h = Hello(address, index, shards);
  h.checkpoint_versions = std::move(versions);
  return h;
}

TEST_CASE("a shard back after the first step: every shard registers again and all go back to the common checkpoint",
          "[coordinator_shards]") {
  CoordinatorShards c = Make(3);
  std::vector<std::vector<uint64_t>> asked;
  c.SetRecover([&asked](const std::vector<std::vector<uint64_t>>& held) -> absl::StatusOr<uint64_t> {
    asked = held;
    return uint64_t{4};
  });
  uint64_t first = 0;
  REQUIRE(*c.Register(HelloHolding("s:1", 1, {}), &first) == 1);
  REQUIRE(*c.Register(HelloHolding("s:2", 2, {})) == 2);
  Adopt(c);
  c.Hooks().session_opened(7, "secret");
  c.Hooks().step(ReplicatedStep{});
  c.Hooks().checkpoint(1, 0xabc);
  c.Hooks().checkpoint(1, 0xabc);  // an interval without a step: not queued again
  std::vector<CoordinatorShards::Outgoing> out = Drain(c, 1);
  REQUIRE(out.size() == 4);  // init, session, step, checkpoint
  REQUIRE(As<ShardCheckpointCommand>(out[3]).version == 1);
  REQUIRE(As<ShardCheckpointCommand>(out[3]).history == 0xabc);  // sync: each slice checks its own against it
  (void)Drain(c, 2);

  c.Disconnect(2);
  REQUIRE(absl::IsUnavailable(c.Serving()));                   // pushes wait for the slice
  REQUIRE(*c.Register(HelloHolding("s:2b", 2, {4, 1})) == 2);  // back: a recovery begins
  CoordinatorShards::Outgoing o;
  REQUIRE(absl::IsAborted(c.Next(1, first, &o, absl::InfinitePast())));  // shard 1 must say what it holds
  c.Disconnect(1);                                                       // its stream's end: not a loss
  REQUIRE(c.Shards()[0].connected == false);
  c.Hooks().step(ReplicatedStep{});  // a round closing meanwhile: undone by the restore, not sent
  REQUIRE(absl::IsUnavailable(c.Serving()));
  REQUIRE(asked.empty());
  REQUIRE(*c.Register(HelloHolding("s:1", 1, {6, 4, 1})) == 1);  // the last one: the recovery runs
  REQUIRE(asked.size() == 3);
  REQUIRE(asked[1] == std::vector<uint64_t>{6, 4, 1});
  REQUIRE(asked[2] == std::vector<uint64_t>{4, 1});
  REQUIRE(c.Serving().ok());
  for (int shard : {1, 2}) {
    out = Drain(c, shard);
    REQUIRE(out.size() == 1);  // the restore alone: no step, no session of before
    REQUIRE(InitOf(out[0]).restore);
    REQUIRE(InitOf(out[0]).version == 4);
    REQUIRE(out[0].values == nullptr);
  }
}

TEST_CASE("shards back from a partition take their own slices in any order; the missing slice is named with its time",
          "[coordinator_shards]") {
  FakeClock clock;
  CoordinatorShardsOptions o = Options(3);
  o.clock = &clock;
  CoordinatorShards c(o);
  c.SetRecover([](const std::vector<std::vector<uint64_t>>&) -> absl::StatusOr<uint64_t> { return uint64_t{1}; });
  REQUIRE(*c.Register(HelloHolding("s:1", 0, {})) == 1);
  REQUIRE(*c.Register(HelloHolding("s:2", 0, {})) == 2);
  Adopt(c);
  c.Hooks().step(ReplicatedStep{});
  REQUIRE(c.WaitingLine().empty());
  clock.Advance(absl::Seconds(3));
  c.Disconnect(1);  // the coordinator's host cut: both streams end
  c.Disconnect(2);
  clock.Advance(absl::Seconds(12));
  REQUIRE(c.Shards()[0].missing_for == absl::Seconds(12));
  REQUIRE(c.Shards()[1].connected == false);
  REQUIRE(c.WaitingLine() == "training waits for slice 1 (last at s:1) for 12 s, slice 2 (last at s:2) for 12 s");
  // Slice 2's shard comes back first, asking for its own slice: it gets it, not the first free one.
  REQUIRE(*c.Register(HelloHolding("s:2", 2, {1})) == 2);
  REQUIRE(c.WaitingLine() == "training waits for slice 1 (last at s:1) for 12 s");
  REQUIRE(*c.Register(HelloHolding("s:1", 1, {1})) == 1);
  REQUIRE(c.Serving().ok());
  REQUIRE(c.Shards()[0].missing_for == absl::ZeroDuration());
  for (int shard : {1, 2}) REQUIRE(InitOf(Drain(c, shard)[0]).index == static_cast<uint32_t>(shard));
}

TEST_CASE("a shard's checkpoints as it reported them, aged on the coordinator's clock, in /metrics",
          "[coordinator_shards]") {
  FakeClock clock;
  CoordinatorShardsOptions o = Options(3);
  o.clock = &clock;
  CoordinatorShards c(o);
  metrics::Registry registry;
  c.ExportMetrics(registry);
  REQUIRE(*c.Register(Hello("s:1")) == 1);
  REQUIRE(*c.Register(Hello("s:2")) == 2);
  CheckpointHealthView failing;
  failing.newest_version = 4;
  failing.newest_age = absl::Seconds(20);
  failing.failures = 3;
  failing.last_error = "No space left on device";
  REQUIRE(absl::IsFailedPrecondition(c.ReportCheckpoints(1, 0, failing)));  // no model, no map yet
  Adopt(c);
  const uint64_t fingerprint = c.map()->fingerprint();
  REQUIRE(absl::IsFailedPrecondition(c.ReportCheckpoints(1, fingerprint + 1, failing)));  // another map
  REQUIRE(absl::IsFailedPrecondition(c.ReportCheckpoints(3, fingerprint, failing)));      // no such slice
  REQUIRE(absl::IsFailedPrecondition(c.ReportCheckpoints(0, fingerprint, failing)));      // the coordinator's own
  REQUIRE(c.ReportCheckpoints(1, fingerprint, failing).ok());
  clock.Advance(absl::Seconds(10));
  const std::vector<CoordinatorShards::ShardInfo> shards = c.Shards();
  REQUIRE(shards[0].checkpoints.has_value());
  REQUIRE(shards[0].checkpoints->newest_age == absl::Seconds(30));
  REQUIRE(shards[0].checkpoints->failing());
  REQUIRE_FALSE(shards[1].checkpoints.has_value());  // slice 2 reported nothing yet
  const std::string text = registry.Serialize();
  REQUIRE(absl::StrContains(text, "omnilearn_coordinator_shard_checkpoint_age_seconds{shard=\"1\"} 30\n"));
  REQUIRE(absl::StrContains(text, "omnilearn_coordinator_shard_checkpoint_failing{shard=\"1\"} 1\n"));
  REQUIRE(absl::StrContains(text, "omnilearn_coordinator_shard_checkpoint_failures{shard=\"1\"} 3\n"));
  REQUIRE_FALSE(absl::StrContains(text, "omnilearn_coordinator_shard_checkpoint_failing{shard=\"2\"}"));
}

TEST_CASE("replicas: each slice's checkpoint goes to the next server; a shard lost for good comes back from it",
          "[coordinator_shards]") {
  CoordinatorShardsOptions options = Options(4);
  options.replicate = true;
  std::map<int, std::vector<uint64_t>> own = {{3, {6, 4}}};  // the coordinator keeps the last slice's
  options.own_replicas = [&own] { return own; };
  CoordinatorShards c(options);
  std::vector<std::vector<uint64_t>> asked;
  c.SetRecover([&asked](const std::vector<std::vector<uint64_t>>& held) -> absl::StatusOr<uint64_t> {
    asked = held;
    return uint64_t{4};
  });
  for (int i = 1; i <= 3; ++i) REQUIRE(*c.Register(HelloHolding(absl::StrCat("s:", i), i, {}, 4)) == i);
  Adopt(c);
  c.Hooks().step(ReplicatedStep{});
  c.Hooks().checkpoint(4, 0xabc);
  for (int i = 1; i <= 3; ++i) {
    const std::vector<CoordinatorShards::Outgoing> out = Drain(c, i);
    const ShardCheckpointCommand& checkpoint = As<ShardCheckpointCommand>(out.back());
    REQUIRE(checkpoint.replica_to == (i < 3 ? absl::StrCat("s:", i + 1) : "coordinator:1"));
  }

  // Shard 2 is lost, disk and all: one started anew for its slice brings nothing, and is let in.
  c.Disconnect(2);
  REQUIRE(*c.Register(HelloHolding("fresh:2", 2, {}, 4)) == 2);
  c.Disconnect(1);
  c.Disconnect(3);
  ShardRegistration one = HelloHolding("s:1", 1, {6, 4}, 4);
  one.replicas = {{0, {6}}};
  REQUIRE(*c.Register(one) == 1);
  ShardRegistration three = HelloHolding("s:3", 3, {6, 4}, 4);
  three.replicas = {{2, {6, 4, 2}}};  // slice 2's, sent by the shard that was lost
  REQUIRE(*c.Register(three) == 3);
  REQUIRE(asked[2] == std::vector<uint64_t>{6, 4, 2});  // its replicas stand for the slice
  REQUIRE(asked[3] == std::vector<uint64_t>{6, 4});     // its own and the coordinator's, once each
  const std::vector<CoordinatorShards::Outgoing> restored = Drain(c, 2);
  REQUIRE(InitOf(restored[0]).restore);
  REQUIRE(InitOf(restored[0]).version == 4);
  REQUIRE(InitOf(restored[0]).replica_from == "s:3");
  REQUIRE(InitOf(Drain(c, 1)[0]).replica_from.empty());   // its own checkpoint
  REQUIRE(c.Answer(*c.map()).addresses[2] == "fresh:2");  // the workers follow the new server
}

TEST_CASE("without replicas a shard that brings no checkpoint after the first step is refused",
          "[coordinator_shards]") {
  CoordinatorShards c = Make(2);
  c.SetRecover([](const std::vector<std::vector<uint64_t>>&) -> absl::StatusOr<uint64_t> { return uint64_t{1}; });
  REQUIRE(*c.Register(HelloHolding("s:1", 1, {}, 2)) == 1);
  Adopt(c);
  c.Hooks().step(ReplicatedStep{});
  c.Hooks().checkpoint(1, 0);
  REQUIRE(As<ShardCheckpointCommand>(Drain(c, 1).back()).replica_to.empty());
  c.Disconnect(1);
  REQUIRE(absl::StrContains(c.Register(HelloHolding("fresh:1", 1, {}, 2)).status().message(), "holds no checkpoint"));
}

TEST_CASE("no shard's claim ends the job: a shard without a common checkpoint is refused and the job waits",
          "[coordinator_shards]") {
  CoordinatorShards c = Make(2);
  bool common = false;
  c.SetRecover([&common](const std::vector<std::vector<uint64_t>>&) -> absl::StatusOr<uint64_t> {
    if (!common) return absl::FailedPreconditionError("no checkpoint is common to every server");
    return uint64_t{3};
  });
  REQUIRE(*c.Register(HelloHolding("s:1", 1, {}, 2)) == 1);
  Adopt(c);
  c.Hooks().step(ReplicatedStep{});
  c.Disconnect(1);
  // One that claims to hold nothing is refused before it takes the slice.
  auto none = c.Register(HelloHolding("impostor", 1, {}, 2));
  REQUIRE(absl::IsFailedPrecondition(none.status()));
  REQUIRE(absl::StrContains(none.status().message(), "holds no checkpoint"));
  // One whose checkpoints meet none of the others' is refused; its slice stays free.
  auto back = c.Register(HelloHolding("s:1b", 1, {99}, 2));
  REQUIRE(absl::IsFailedPrecondition(back.status()));
  REQUIRE(absl::StrContains(back.status().message(), "no checkpoint is common"));
  REQUIRE(c.Shards()[0].connected == false);
  REQUIRE(absl::IsUnavailable(c.AwaitShards(absl::InfinitePast())));  // joins wait: the job goes on later
  common = true;
  REQUIRE(*c.Register(HelloHolding("s:1c", 1, {3}, 2)) == 1);  // the real shard
  REQUIRE(c.Serving().ok());
}

TEST_CASE("every field of a shard's registration is range-checked", "[coordinator_shards]") {
  CoordinatorShards c = Make(3);
  // The slice index: 2^31 and 2^32-1 are no slices (they once became -2^31 and -1).
  for (uint32_t index : {3u, 1u << 31, 0xffffffffu}) {
    ShardRegistration h = Hello("s:1");
    h.index = index;
    REQUIRE(absl::IsFailedPrecondition(c.Register(h).status()));
  }
  ShardRegistration shards = Hello("s:1");
  shards.shards = 0xffffffffu;  // once cast to -1
  REQUIRE(absl::IsFailedPrecondition(c.Register(shards).status()));
  ShardRegistration partition = Hello("s:1");
  partition.partition_bytes = -kPartition;
  REQUIRE(absl::IsFailedPrecondition(c.Register(partition).status()));
  REQUIRE(absl::IsInvalidArgument(c.Register(Hello(std::string(256, 'a'))).status()));
  REQUIRE(absl::IsInvalidArgument(c.Register(Hello("s:1\nforged log line")).status()));
  REQUIRE(absl::IsInvalidArgument(c.Register(Hello("s 1")).status()));
  ShardRegistration versions = Hello("s:1");
  for (int i = 0; i <= kMaxShardCheckpoints; ++i) versions.checkpoint_versions.push_back(i);
  REQUIRE(absl::IsInvalidArgument(c.Register(versions).status()));
  ShardRegistration replicas = Hello("s:1");
  replicas.replicas[3] = {1};  // a slice the job does not have
  REQUIRE(absl::IsInvalidArgument(c.Register(replicas).status()));
  replicas.replicas.clear();
  for (int i = 0; i <= kMaxShardCheckpoints; ++i) replicas.replicas[1].push_back(i);
  REQUIRE(absl::IsInvalidArgument(c.Register(replicas).status()));
  replicas.replicas.clear();
  for (int i = 0; i <= kMaxShardReplicaSlices; ++i) replicas.replicas[i] = {};
  REQUIRE(absl::IsInvalidArgument(c.Register(replicas).status()));
  REQUIRE(c.registered() == 0);  // none of them took a slice
  Adopt(c);
  ShardRegistration other = Hello("s:1");
  other.fingerprint = c.map()->fingerprint() ^ 1;  // a shard of another job's map
  auto refused = c.Register(other);
  REQUIRE(absl::IsFailedPrecondition(refused.status()));
  REQUIRE(absl::StrContains(refused.status().message(), "fingerprint"));
  other.fingerprint = c.map()->fingerprint();
  REQUIRE(c.Register(other).ok());
}

TEST_CASE("a coordinator on an empty disk takes its job from slice 0's replicas on a shard; joins wait meanwhile",
          "[coordinator_shards]") {
  const ShardMap map = *ShardMap::Plan(Model(), 3, kPartition);
  const ShardedJob job{Model(), 3, kPartition};
  CoordinatorShards c = Make(3);
  c.SetRecover([](const std::vector<std::vector<uint64_t>>& held) -> absl::StatusOr<uint64_t> { return held[1][0]; });
  std::vector<std::string> asked;
  bool fails = true;
  c.SetAdopt([&](const std::string& address, const std::vector<uint64_t>& versions, uint64_t fingerprint) {
    asked.push_back(absl::StrCat(address, " ", absl::StrJoin(versions, ","), " ", fingerprint == map.fingerprint()));
    REQUIRE(absl::StrContains(c.Serving().message(), "taken from slice 0's replicas at s:1"));  // joins wait
    if (fails) return absl::UnavailableError("connection refused");
    return c.Resume(job, map.slice_layout(0));  // as the daemon's hook does, once it kept the replicas
  });
  REQUIRE(*c.Register(HelloHolding("s:2", 2, {7, 5})) == 2);  // keeps no replica of slice 0: nothing to take
  REQUIRE(asked.empty());
  c.Disconnect(2);
  ShardRegistration live = HelloHolding("s:2", 2, {7, 5});
  live.fingerprint = map.fingerprint();  // a live shard of the job that trained: it waits for the replicas
  const absl::Status waits = c.Register(live).status();
  REQUIRE(absl::IsUnavailable(waits));
  REQUIRE(absl::StrContains(waits.message(), "waits for the shard that keeps slice 0's replicas"));
  REQUIRE(*c.Register(HelloHolding("s:2", 2, {7, 5})) == 2);
  ShardRegistration one = HelloHolding("s:1", 1, {7, 5});
  one.fingerprint = map.fingerprint();
  one.replicas = {{0, {7, 5}}};
  absl::StatusOr<int> refused = c.Register(one);  // the replicas cannot be read: it registers again
  REQUIRE(absl::IsUnavailable(refused.status()));
  REQUIRE(c.Shards()[0].connected == false);
  fails = false;
  uint64_t generation = 0;
  REQUIRE(*c.Register(one, &generation) == 1);
  REQUIRE(asked == std::vector<std::string>{"s:1 7,5 1", "s:1 7,5 1"});
  REQUIRE(c.map()->fingerprint() == map.fingerprint());  // the job is the replicas'
  CoordinatorShards::Outgoing o;
  REQUIRE(absl::IsAborted(c.Next(1, generation, &o, absl::InfinitePast())));  // every shard says what it holds
  REQUIRE(*c.Register(one) == 1);
  REQUIRE(*c.Register(HelloHolding("s:2", 2, {7, 5})) == 2);
  REQUIRE(c.Serving().ok());
  for (int shard : {1, 2}) {
    const std::vector<CoordinatorShards::Outgoing> out = Drain(c, shard);
    REQUIRE(InitOf(out[0]).restore);
    REQUIRE(InitOf(out[0]).version == 7);
  }
  REQUIRE(asked.size() == 2);  // a job once taken is not taken again
}

TEST_CASE("a restarted coordinator resumes its job: every shard registers, all go back to the common checkpoint",
          "[coordinator_shards]") {
  const ShardMap map = *ShardMap::Plan(Model(), 3, kPartition);
  const ShardedJob job{Model(), 3, kPartition};
  {
    CoordinatorShards c = Make(3);  // the checkpoint's job, written by the first coordinator
    REQUIRE_FALSE(c.sharded_job().has_value());
    Adopt(c);
    REQUIRE(c.sharded_job() == job);
  }
  CoordinatorShards c = Make(3);
  REQUIRE(absl::IsFailedPrecondition(c.Resume(job, map.slice_layout(0))));  // no checkpoints kept
  std::vector<std::vector<uint64_t>> asked;
  c.SetRecover([&asked](const std::vector<std::vector<uint64_t>>& held) -> absl::StatusOr<uint64_t> {
    asked = held;
    return uint64_t{9};
  });
  absl::Status other = c.Resume(ShardedJob{Model(), 4, kPartition}, map.slice_layout(0));
  REQUIRE(absl::IsFailedPrecondition(other));
  REQUIRE(absl::StrContains(other.message(), "--shards=4 --partition_mb="));
  REQUIRE(absl::IsFailedPrecondition(c.Resume(job, map.slice_layout(1))));  // not this job's slice 0
  REQUIRE(c.Resume(job, map.slice_layout(0)).ok());
  REQUIRE(c.map()->fingerprint() == map.fingerprint());
  REQUIRE(absl::IsUnavailable(c.Serving()));  // joins wait for every shard
  REQUIRE(*c.Register(HelloHolding("s:2", 2, {9, 4})) == 2);
  REQUIRE(absl::IsUnavailable(c.Serving()));
  REQUIRE(asked.empty());
  REQUIRE(*c.Register(HelloHolding("s:1", 1, {10, 9})) == 1);
  REQUIRE(asked.size() == 3);
  REQUIRE(asked[1] == std::vector<uint64_t>{10, 9});
  REQUIRE(c.Serving().ok());
  for (int shard : {1, 2}) {
    std::vector<CoordinatorShards::Outgoing> out = Drain(c, shard);
    REQUIRE(out.size() == 1);
    REQUIRE(InitOf(out[0]).restore);
    REQUIRE(InitOf(out[0]).version == 9);
    REQUIRE(InitOf(out[0]).fingerprint == map.fingerprint());
  }
  // Workers join with the job's model: the same map.
  REQUIRE(c.PlanFor(Model())->fingerprint() == map.fingerprint());
  c.Hooks().checkpoint(9, 0xabc);  // the version every server holds: not asked again
  REQUIRE(Drain(c, 1).empty());
}

CoordinatorShards MakeClipped(int shards, const Clock* clock) {
  CoordinatorShardsOptions o = Options(shards);
  o.optimizer.clip_grad_norm = 1;
  o.clock = clock;
  return CoordinatorShards(o);
}

// A job that needs what a shard of an earlier release cannot do (`flag`): `hello` without
// `can` is refused, naming the flag; with it, it registers for its slice.
void RefusedUnless(CoordinatorShards& c, const std::string& flag, ShardRegistration hello,
                   bool ShardRegistration::*can) {
  auto old = c.Register(hello);  // a shard of an earlier release
  REQUIRE(absl::IsFailedPrecondition(old.status()));
  REQUIRE(absl::StrContains(old.status().message(), flag));
  hello.*can = true;
  REQUIRE(*c.Register(hello) == static_cast<int>(hello.index));
}

TEST_CASE("a clipped job: shards that cannot reduce the norm are refused; every slice's part is summed",
          "[coordinator_shards]") {
  FakeClock clock;
  CoordinatorShards c = MakeClipped(3, &clock);
  RefusedUnless(c, "--clip_grad_norm", Hello("s:1", 1), &ShardRegistration::reduces_norm);
  RefusedUnless(c, "--clip_grad_norm", Hello("s:2", 2), &ShardRegistration::reduces_norm);
  Replication hooks = c.Hooks();
  REQUIRE(hooks.norm != nullptr);
  REQUIRE(Make(3).Hooks().norm == nullptr);  // a job that does not clip reduces nothing
  // The shards' parts come while the coordinator's (slice 0, through the core's hook) waits.
  absl::StatusOr<double> from1, from2;
  std::thread s1([&] { from1 = c.ReduceNorm(7, 1, 2.0, absl::InfiniteFuture()); });
  std::thread s2([&] { from2 = c.ReduceNorm(7, 2, 3.0, absl::InfiniteFuture()); });
  REQUIRE(hooks.norm(7, 0.5) == 5.5);
  s1.join();
  s2.join();
  REQUIRE(*from1 == 5.5);
  REQUIRE(*from2 == 5.5);
  REQUIRE(absl::IsInvalidArgument(c.ReduceNorm(7, 1, 1.0, absl::InfiniteFuture()).status()));  // twice
  REQUIRE(absl::IsInvalidArgument(c.ReduceNorm(8, 3, 1.0, absl::InfiniteFuture()).status()));  // no slice 3
  REQUIRE(absl::IsInvalidArgument(c.ReduceNorm(8, 1, -1.0, absl::InfiniteFuture()).status()));
  REQUIRE(absl::IsInvalidArgument(c.ReduceNorm(8, 1, std::nan(""), absl::InfiniteFuture()).status()));
}

TEST_CASE("--shard_steps_ahead: shards that cannot step ahead are refused; a round ahead follows its step",
          "[coordinator_shards]") {
  CoordinatorShardsOptions o = Options(2);
  o.steps_ahead = true;
  CoordinatorShards c(o);
  RefusedUnless(c, "--shard_steps_ahead", Hello("s:1", 1, 2), &ShardRegistration::steps_ahead);
  Adopt(c);
  Replication hooks = c.Hooks();
  REQUIRE(hooks.round_ahead != nullptr);
  REQUIRE(Make(2).Hooks().round_ahead == nullptr);  // not asked for: rounds are not sent ahead
  o.sync = false;
  REQUIRE(CoordinatorShards(o).Hooks().round_ahead == nullptr);  // async has no rounds
  ReplicatedStep step;
  step.members = {{7, 0, 2.0}};
  hooks.step(step);
  RoundAhead round;
  round.version = 1;
  round.members = {7, 9};
  round.learning_rate = 0.05;
  hooks.round_ahead(round);
  std::vector<CoordinatorShards::Outgoing> out = Drain(c, 1);
  REQUIRE(out.size() == 3);
  REQUIRE(As<ReplicatedStep>(out[1]).version == 0);
  REQUIRE(As<RoundAhead>(out[2]).version == 1);
  REQUIRE(As<RoundAhead>(out[2]).members == std::vector<WorkerId>{7, 9});
  REQUIRE(As<RoundAhead>(out[2]).learning_rate == 0.05);
}

TEST_CASE("a clipped step's norm goes on without a part that does not come; that part is refused after",
          "[coordinator_shards]") {
  FakeClock clock;
  CoordinatorShards c = MakeClipped(3, &clock);
  ShardRegistration h1 = Hello("s:1", 1), h2 = Hello("s:2", 2);
  h1.reduces_norm = true;
  h2.reduces_norm = true;
  REQUIRE(*c.Register(h1) == 1);
  REQUIRE(*c.Register(h2) == 2);
  // Slice 2's part never comes: at the deadline slice 0 goes on with the parts it has, and
  // slice 1, waiting, learns that the step went on without a part.
  absl::StatusOr<double> from1, from0;
  std::thread s1([&] { from1 = c.ReduceNorm(3, 1, 2.0, absl::InfiniteFuture()); });
  std::thread s0([&] { from0 = c.ReduceNorm(3, 0, 1.0, clock.Now() + absl::Seconds(30)); });
  REQUIRE(AwaitState([&] { return clock.waiters() >= 2; }));
  clock.Advance(absl::Seconds(31));
  s0.join();
  s1.join();
  REQUIRE(*from0 == 3.0);
  REQUIRE(absl::IsFailedPrecondition(from1.status()));
  auto late = c.ReduceNorm(3, 2, 4.0, absl::InfiniteFuture());
  REQUIRE(absl::IsFailedPrecondition(late.status()));
  REQUIRE(absl::StrContains(late.status().message(), "too late"));
  // A shard that owes its part and is gone does not hold slice 0 until the deadline.
  c.Disconnect(2);
  REQUIRE(c.ReduceNorm(4, 0, 1.0, absl::InfiniteFuture()).value() == 1.0);
}

TEST_CASE("a new job on the same servers: every shard gets the next model's slice under the new job's number",
          "[coordinator_shards]") {
  CoordinatorShardsOptions o = Options(2);
  o.reset_when_done = true;
  CoordinatorShards c(o);
  RefusedUnless(c, "--reset_when_done", Hello("s:1", 1, 2), &ShardRegistration::resets_jobs);
  Adopt(c);
  ReplicatedStep step;
  c.Hooks().step(step);
  std::vector<CoordinatorShards::Outgoing> out = Drain(c, 1);
  REQUIRE(out.size() == 2);
  REQUIRE(InitOf(out[0]).job == 1);
  // The job ends and the next begins: its model goes to the connected shard at version 0,
  // with no step between (the slice may be sent again until the new job's first step).
  c.Hooks().job_reset(2);
  REQUIRE_FALSE(c.job_layout().has_value());
  Adopt(c);
  out = Drain(c, 1);
  REQUIRE(out.size() == 1);
  REQUIRE(InitOf(out[0]).job == 2);
  REQUIRE(InitOf(out[0]).version == 0);
  REQUIRE_FALSE(InitOf(out[0]).restore);
  REQUIRE(out[0].values != nullptr);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
