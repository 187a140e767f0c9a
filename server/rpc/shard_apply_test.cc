#include "server/rpc/shard_apply.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "common/await_state.h"
#include "common/clock.h"
#include "common/shard_map.h"
#include "common/tensor_codec.h"
#include "server/rpc/shard_commands_testing.h"
#include "server/rpc/shard_wire.h"

// ShardOptimizer.kind is deprecated; this file is what a coordinator of the previous release sends.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace omnilearn {
namespace server {
namespace {

using testing::Init;
using testing::kPartition;
using testing::Map;
using testing::Model;
using testing::Step;
using testing::Values;

ShardApplier Make(ShardCore* shard, std::string dir = "") {
  return ShardApplier({/*shards=*/2, kPartition, /*index=*/0, std::move(dir), 3, nullptr}, shard);
}

// Prepared (checkpoints in memory), then the coordinator's init and its values: the shard
// holds slice 1 at version 0.
void HoldSlice(ShardApplier& a) {
  REQUIRE(a.Prepare().ok());
  REQUIRE(a.Apply(Init()).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(a.Apply(c).ok());
}

v1::ShardCommand Session(WorkerId id, std::string secret) {
  v1::ShardCommand c;
  c.mutable_session()->set_worker_id(id);
  c.mutable_session()->set_session_secret(std::move(secret));
  return c;
}

// The coordinator sends the shard back to its checkpoint of `version`, which held `weights`.
void RestoreTo(ShardApplier& a, ShardCore& shard, uint64_t version, const std::vector<float>& weights) {
  v1::ShardCommand restore = Init();
  restore.mutable_init()->set_restore(true);
  restore.mutable_init()->set_version(version);
  REQUIRE(a.Apply(restore).ok());
  REQUIRE(shard.version() == version);
  REQUIRE(*shard.Capture()->weights == weights);
}

TEST_CASE("an init and its chunks give the shard its slice; sessions and steps follow", "[shard_apply]") {
  ShardCore shard({});
  ShardApplier a = Make(&shard);
  REQUIRE(a.fingerprint() == 0);
  REQUIRE(a.Apply(Init()).ok());
  std::vector<v1::ShardCommand> values = Values();
  REQUIRE(values.size() > 1);
  REQUIRE_FALSE(shard.initialized());
  for (const v1::ShardCommand& c : values) REQUIRE(a.Apply(c).ok());
  REQUIRE(shard.initialized());
  REQUIRE(a.fingerprint() == Map().fingerprint());
  REQUIRE(a.Apply(Session(7, "secret")).ok());
  REQUIRE(shard.Authenticate(7, "secret").ok());
  REQUIRE(a.Apply(Step(0)).ok());  // no members: the version moves on
  REQUIRE(shard.version() == 1);
  REQUIRE(absl::IsAborted(a.Apply(Step(0))));  // a step missed or replayed: registers again
}

TEST_CASE("a clipped job's steps reduce the slice's norm with the coordinator, under the slice and its map",
          "[shard_apply]") {
  v1::ShardCommand init = Init();
  init.mutable_init()->mutable_optimizer()->set_clip_grad_norm(1);
  {  // no way to the coordinator's norm: the init is refused, not a step later
    ShardCore shard({});
    ShardApplier a = Make(&shard);
    REQUIRE(a.Apply(init).ok());
    absl::Status refused;
    for (const v1::ShardCommand& c : Values()) refused = a.Apply(c);
    REQUIRE(absl::IsFailedPrecondition(refused));
    REQUIRE(absl::StrContains(refused.message(), "clips"));
  }
  ShardCore shard({});
  std::vector<v1::ShardNorm> parts;
  ShardApplier a({/*shards=*/2, kPartition, /*index=*/0, "", 3, nullptr,
                  [&parts](const v1::ShardNorm& part) -> absl::StatusOr<double> {
                    parts.push_back(part);
                    return part.sum_squares() + 1;
                  }},
                 &shard);
  REQUIRE(a.Apply(init).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(a.Apply(c).ok());
  REQUIRE(a.Apply(Step(0)).ok());  // no members: its part is 0, and it is given
  REQUIRE(parts.size() == 1);
  REQUIRE(parts[0].version() == 0);
  REQUIRE(parts[0].index() == 1);
  REQUIRE(parts[0].sum_squares() == 0);
  REQUIRE(parts[0].fingerprint() == Map().fingerprint());
  REQUIRE(shard.version() == 1);
}

TEST_CASE("commands out of order are refused", "[shard_apply]") {
  ShardCore shard({});
  ShardApplier a = Make(&shard);
  REQUIRE(absl::IsInvalidArgument(a.Apply(Values()[0])));  // a chunk without an init
  REQUIRE(a.Apply(Init()).ok());
  REQUIRE(absl::IsInvalidArgument(a.Apply(Session(7, "s"))));  // the values ended early
  a.Restart();                                                 // a new stream: the half-received init is forgotten
  REQUIRE(absl::IsInvalidArgument(a.Apply(Values()[0])));
  v1::ShardCommand unknown;
  REQUIRE(absl::IsInvalidArgument(a.Apply(unknown)));
}

TEST_CASE("every field of an init is range-checked before use", "[shard_apply]") {
  ShardCore shard({});
  ShardApplier a = Make(&shard);
  for (uint32_t index : {0u, 2u, 1u << 31, 0xffffffffu}) {  // slice 0 is the coordinator's; 2 is no slice
    v1::ShardCommand c = Init(index);
    REQUIRE_FALSE(a.Apply(c).ok());
  }
  v1::ShardCommand other = Init();
  other.mutable_init()->set_fingerprint(Map().fingerprint() ^ 1);
  REQUIRE(absl::IsFailedPrecondition(a.Apply(other)));
  v1::ShardCommand layout = Init();
  layout.mutable_init()->mutable_layout()->mutable_tensors(0)->set_shape(0, -1);
  REQUIRE_FALSE(a.Apply(layout).ok());
  v1::ShardCommand kind = Init();
  kind.mutable_init()->mutable_optimizer()->set_optimizer(static_cast<v1::OptimizerKind>(99));
  REQUIRE(absl::IsInvalidArgument(a.Apply(kind)));
  kind.mutable_init()->mutable_optimizer()->clear_optimizer();  // the string of an earlier release
  kind.mutable_init()->mutable_optimizer()->set_kind("lbfgs");
  REQUIRE(absl::IsInvalidArgument(a.Apply(kind)));
  const double nan = std::nan("");
  struct Bad {
    const char* field;
    std::function<void(v1::ShardOptimizer*)> set;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"momentum", [](v1::ShardOptimizer* o) { o->set_momentum(1); }},
           {"momentum", [nan](v1::ShardOptimizer* o) { o->set_momentum(nan); }},
           {"weight_decay", [](v1::ShardOptimizer* o) { o->set_weight_decay(-1); }},
           {"beta1", [](v1::ShardOptimizer* o) { o->set_beta1(1); }},
           {"beta2", [](v1::ShardOptimizer* o) { o->set_beta2(-0.1); }},
           {"eps", [](v1::ShardOptimizer* o) { o->set_eps(0); }},
           {"round_timeout_seconds", [](v1::ShardOptimizer* o) { o->set_round_timeout_seconds(1e300); }},
           {"round_timeout_seconds", [](v1::ShardOptimizer* o) { o->set_round_timeout_seconds(-1); }},
       }) {
    v1::ShardCommand c = Init();
    bad.set(c.mutable_init()->mutable_optimizer());
    const absl::Status s = a.Apply(c);
    INFO(bad.field << ": " << s.ToString());
    REQUIRE(absl::IsInvalidArgument(s));
    REQUIRE(absl::StrContains(s.message(), bad.field));
  }
  REQUIRE_FALSE(shard.initialized());
}

TEST_CASE("every field of a step and a session is range-checked before use", "[shard_apply]") {
  const double inf = std::numeric_limits<double>::infinity();
  struct Bad {
    const char* field;
    std::function<void(v1::ShardStep*)> set;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"update_scale", [](v1::ShardStep* s) { s->set_update_scale(-1); }},
           {"update_scale", [inf](v1::ShardStep* s) { s->set_update_scale(inf); }},
           {"learning_rate", [](v1::ShardStep* s) { s->set_learning_rate(-0.1); }},
           {"learning_rate", [](v1::ShardStep* s) { s->set_learning_rate(std::nan("")); }},
           {"buffer_blend", [](v1::ShardStep* s) { s->set_buffer_blend(2); }},
           {"momentum", [](v1::ShardStep* s) { s->set_momentum(1); }},
           {"momentum", [](v1::ShardStep* s) { s->set_momentum(-2); }},
           {"members.weight", [](v1::ShardStep* s) { s->add_members()->set_weight(-1); }},
           {"members.weight", [inf](v1::ShardStep* s) { s->add_members()->set_weight(inf); }},
           {"members",
            [](v1::ShardStep* s) {
              for (int i = 0; i <= kMaxStepMembers; ++i) s->add_members()->set_weight(1);
            }},
       }) {
    v1::ShardCommand c = Step(0);
    bad.set(c.mutable_step());
    const absl::Status s = CheckShardCommand(c);
    INFO(bad.field << ": " << s.ToString());
    REQUIRE(absl::IsInvalidArgument(s));
    REQUIRE(absl::StrContains(s.message(), bad.field));
  }
  REQUIRE(CheckShardCommand(Step(0)).ok());
  REQUIRE(absl::IsInvalidArgument(CheckShardCommand(Session(1, ""))));  // an open session needs its secret
  REQUIRE(absl::IsInvalidArgument(CheckShardCommand(Session(1, std::string(kMaxSessionSecretBytes + 1, 's')))));
  v1::ShardCommand closed = Session(1, "");
  closed.mutable_session()->set_closed(true);
  REQUIRE(CheckShardCommand(closed).ok());
}

TEST_CASE("a restore needs the slice's checkpoint of the version", "[shard_apply]") {
  ShardCore shard({});
  v1::ShardCommand restore = Init();
  restore.mutable_init()->set_restore(true);
  restore.mutable_init()->set_version(4);
  ShardApplier none = Make(&shard);
  REQUIRE(absl::IsNotFound(none.Apply(restore)));  // nothing in memory yet
  const char* tmp = std::getenv("TEST_TMPDIR");
  ShardApplier kept = Make(&shard, std::string(tmp ? tmp : "/tmp") + "/shard_apply_test");
  REQUIRE(kept.Prepare().ok());
  REQUIRE(kept.CheckpointVersions().empty());
  REQUIRE_FALSE(kept.Apply(restore).ok());  // no checkpoint of version 4
  REQUIRE(kept.Apply(Init()).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(kept.Apply(c).ok());
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(0);
  REQUIRE(kept.Apply(checkpoint).ok());
  REQUIRE(kept.CheckpointVersions() == std::vector<uint64_t>{0});
  checkpoint.mutable_checkpoint()->set_version(3);  // not the slice's version: registers again
  REQUIRE(absl::IsAborted(kept.Apply(checkpoint)));
  restore.mutable_init()->set_version(0);
  REQUIRE(kept.Apply(restore).ok());
  REQUIRE(shard.version() == 0);
}

TEST_CASE("without a directory the slice's checkpoints are kept in memory, and a restore goes back to one",
          "[shard_apply]") {
  ShardCore shard({});
  ShardApplier a = Make(&shard);
  HoldSlice(a);
  const std::vector<float> at0 = *shard.Capture()->weights;
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(0);
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(a.Apply(Session(7, "secret")).ok());
  REQUIRE(a.Apply(Step(0)).ok());
  checkpoint.mutable_checkpoint()->set_version(1);
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(a.Apply(Step(1)).ok());
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{1, 0});
  RestoreTo(a, shard, 0, at0);
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{0});  // 1's history was undone
}

TEST_CASE("replicas: a checkpoint goes where the coordinator says; a new shard restores from another's replica",
          "[shard_apply]") {
  // The shard that is later lost: its checkpoint of version 1 goes to "next:1" as the replica.
  ShardCore lost({});
  std::vector<std::pair<std::string, CheckpointState>> sent;
  ShardApplierOptions options{/*shards=*/2, kPartition, /*index=*/0, "", 3, nullptr};
  options.keep_replica = [&sent](const std::string& to, const CheckpointState& state, uint64_t fingerprint) {
    REQUIRE(fingerprint == Map().fingerprint());
    sent.emplace_back(to, state);
  };
  ShardApplier a(options, &lost);
  HoldSlice(a);
  REQUIRE(a.Apply(Session(7, "secret")).ok());
  REQUIRE(a.Apply(Step(0)).ok());
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(1);
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(sent.empty());  // no replica asked for
  checkpoint.mutable_checkpoint()->set_replica_to("next:1");
  REQUIRE(a.Apply(Step(1)).ok());
  checkpoint.mutable_checkpoint()->set_version(2);
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(sent.size() == 1);
  REQUIRE(sent[0].first == "next:1");
  REQUIRE(sent[0].second.slice == 1);
  REQUIRE(sent[0].second.version == 2);
  const std::vector<float> at2 = *lost.Capture()->weights;

  // Its replacement holds nothing; the coordinator names the replica to restore from.
  ShardCore fresh({});
  options.keep_replica = nullptr;
  std::vector<std::string> asked;
  bool reachable = false;
  options.fetch_replica = [&](const std::string& from, int index, uint64_t version,
                              uint64_t fingerprint) -> absl::StatusOr<CheckpointState> {
    asked.push_back(absl::StrCat(from, " ", index, " ", version, " ", fingerprint == Map().fingerprint()));
    if (!reachable) return absl::UnavailableError("connection refused");
    return sent[0].second;
  };
  ShardApplier b(options, &fresh);
  REQUIRE(b.Prepare().ok());
  v1::ShardCommand restore = Init();
  restore.mutable_init()->set_restore(true);
  restore.mutable_init()->set_version(2);
  REQUIRE(absl::IsNotFound(b.Apply(restore)));  // not from its own: it has none
  restore.mutable_init()->set_replica_from("next:1");
  REQUIRE(absl::IsAborted(b.Apply(restore)));  // unreachable: it registers again
  reachable = true;
  REQUIRE(b.Apply(restore).ok());
  REQUIRE(asked == std::vector<std::string>{"next:1 1 2 1", "next:1 1 2 1"});
  REQUIRE(fresh.version() == 2);
  REQUIRE(*fresh.Capture()->weights == at2);
  REQUIRE(b.CheckpointVersions() == std::vector<uint64_t>{2});  // kept as its own for the next recovery
  REQUIRE(b.slice_asked() == 1);
  restore.mutable_init()->set_version(1);  // a replica of another version than named
  REQUIRE(absl::IsFailedPrecondition(b.Apply(restore)));
}

TEST_CASE("sync: a slice whose step history differs from the coordinator's keeps no checkpoint of it",
          "[shard_apply]") {
  ShardCore shard({});
  ShardApplier a = Make(&shard);
  HoldSlice(a);
  REQUIRE(a.Apply(Step(0)).ok());  // no members
  const uint64_t at1 = ExtendHistory(0, 0, {});
  REQUIRE(shard.Capture()->history == at1);
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(1);
  checkpoint.mutable_checkpoint()->set_history(at1);  // the coordinator's: the same steps
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{1});
  REQUIRE(a.Apply(Step(1)).ok());
  // The coordinator's step 1 took worker 7's gradient; this slice's took nobody's.
  checkpoint.mutable_checkpoint()->set_version(2);
  checkpoint.mutable_checkpoint()->set_history(ExtendHistory(at1, 1, {{7, 1, 1.0}}));
  const absl::Status s = a.Apply(checkpoint);
  REQUIRE(absl::IsAborted(s));  // the shard registers again: the job goes back to version 1
  REQUIRE(absl::StrContains(s.message(), "step history at version 2"));
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{1});
  // Async (or a coordinator of an earlier release): no history to check.
  checkpoint.mutable_checkpoint()->set_history(0);
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{2, 1});
}

TEST_CASE("checkpoints applied after the stream ended are not reported: the next registration names them",
          "[shard_apply]") {
  ShardCore shard({});
  FakeClock clock;
  CheckpointHealth health(&clock, /*in_memory=*/true);
  int reports = 0;
  std::vector<std::string> lines;
  ShardApplierOptions o{
      /*shards=*/2, kPartition, /*index=*/0,
      "",           3,          [&lines](const std::string& line) { lines.push_back(line); }};
  o.health = &health;
  o.report_checkpoints = [&reports](const v1::ShardCheckpoints&) {
    ++reports;
    return absl::UnavailableError("connection refused");  // the coordinator has gone
  };
  ShardApplier a(o, &shard);
  REQUIRE(a.Apply(Init()).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(a.Apply(c).ok());
  auto said = [&lines](const char* what) {
    return std::count_if(lines.begin(), lines.end(),
                         [what](const std::string& l) { return absl::StrContains(l, what); });
  };
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(0);
  REQUIRE(a.Apply(checkpoint).ok());  // while the stream is open: reported, its failure logged
  REQUIRE(reports == 1);
  REQUIRE(said("did not take this shard's checkpoint report: connection refused") == 1);
  a.StreamEnded();  // the coordinator's job ended; its last commands are still applied
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(reports == 1);
  REQUIRE(said("did not take") == 1);
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{0});  // kept: the next hello names it
  a.Restart();                                                  // a new registration reports again
  REQUIRE(a.Apply(Init()).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(a.Apply(c).ok());
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(reports == 2);
}

TEST_CASE("a checkpoint the disk cannot take: the slice goes on, the failure is counted and reported",
          "[shard_apply]") {
  ShardCore shard({});
  FakeClock clock;
  CheckpointHealth health(&clock, /*in_memory=*/false);
  std::vector<v1::ShardCheckpoints> reports;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/shard_apply_unwritable";
  ShardApplierOptions o{/*shards=*/2, kPartition, /*index=*/0, dir, 3, nullptr};
  o.health = &health;
  o.report_checkpoints = [&](const v1::ShardCheckpoints& r) {
    reports.push_back(r);
    return absl::OkStatus();
  };
  ShardApplier a(o, &shard);
  REQUIRE(a.Prepare().ok());
  REQUIRE(a.Apply(Init()).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(a.Apply(c).ok());
  // The directory is gone and a file stands in its place: every write fails (as root,
  // permissions would not stop it).
  REQUIRE(std::system(("rm -rf " + dir + " && touch " + dir).c_str()) == 0);
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(0);
  REQUIRE(a.Apply(checkpoint).ok());  // the stream goes on
  REQUIRE(health.View().failing());
  REQUIRE(health.View().failures == 1);
  REQUIRE(reports.size() == 1);
  REQUIRE(reports[0].index() == 1);
  REQUIRE(reports[0].fingerprint() == a.fingerprint());
  REQUIRE(reports[0].checkpoints().failures() == 1);
  REQUIRE_FALSE(reports[0].checkpoints().last_error().empty());
  REQUIRE(a.Apply(Session(7, "secret")).ok());
  REQUIRE(a.Apply(Step(0)).ok());  // training goes on
  // The disk back: the next checkpoint is written and the failure is over.
  REQUIRE(std::system(("rm -f " + dir + " && mkdir -p " + dir).c_str()) == 0);
  checkpoint.mutable_checkpoint()->set_version(1);
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE_FALSE(health.View().failing());
  REQUIRE(health.View().newest_version == 1);
  REQUIRE(reports.size() == 2);
  REQUIRE(reports[1].checkpoints().newest_version() == 1);
  REQUIRE(reports[1].checkpoints().last_error().empty());
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{1});
}

TEST_CASE("a shard asks for the slice it holds, and one offered another slice registers again", "[shard_apply]") {
  ShardCore shard({});
  ShardApplier a = Make(&shard);
  REQUIRE(a.slice_asked() == 0);  // a fresh shard takes any free slice
  REQUIRE(a.Apply(Init()).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(a.Apply(c).ok());
  REQUIRE(a.slice_asked() == 1);
  ShardCore other({});
  ShardApplier b({/*shards=*/3, kPartition, /*index=*/2, "", 3, nullptr}, &other);
  REQUIRE(b.slice_asked() == 2);  // --shard_index
  v1::ShardCommand init = Init();
  absl::StatusOr<ShardMap> three = ShardMap::Plan(Model(), 3, kPartition);
  init.mutable_init()->set_fingerprint(three->fingerprint());
  const absl::Status offered = b.Apply(init);  // slice 1 of 3
  REQUIRE(absl::IsAborted(offered));
  REQUIRE(absl::StrContains(offered.message(), "offered slice 1, and this shard was started for slice 2"));
  REQUIRE_FALSE(other.initialized());
  // A restart on the slice's directory asks for the slice its newest checkpoint holds.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/shard_apply_asks";
  {
    ShardApplier kept = Make(&shard, dir);
    REQUIRE(kept.Prepare().ok());
    REQUIRE(kept.Apply(Init()).ok());
    for (const v1::ShardCommand& c : Values()) REQUIRE(kept.Apply(c).ok());
    v1::ShardCommand checkpoint;
    checkpoint.mutable_checkpoint()->set_version(0);
    REQUIRE(kept.Apply(checkpoint).ok());
  }
  ShardCore restarted({});
  ShardApplier again = Make(&restarted, dir);
  REQUIRE(again.slice_asked() == 0);
  REQUIRE(again.Prepare().ok());
  REQUIRE(again.slice_asked() == 1);
}

TEST_CASE("an init of the coordinator's next job replaces the slice: sessions end, checkpoints go aside",
          "[shard_apply]") {
  FakeClock clock;  // a session's announcement is waited for on it
  ShardCore shard({&clock, nullptr});
  const char* tmp = std::getenv("TEST_TMPDIR");
  ShardApplier a = Make(&shard, std::string(tmp ? tmp : "/tmp") + "/shard_apply_jobs");
  REQUIRE(a.Prepare().ok());
  v1::ShardCommand first = Init();
  first.mutable_init()->set_job(1);
  REQUIRE(a.Apply(first).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(a.Apply(c).ok());
  REQUIRE(a.Apply(Session(7, "secret")).ok());
  REQUIRE(a.Apply(Step(0)).ok());
  REQUIRE(a.Apply(Step(1)).ok());
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(2);
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(shard.version() == 2);
  // The same job's init at another version is a missed step; the next job's starts afresh.
  REQUIRE(a.Apply(first).ok());
  absl::Status same;
  for (const v1::ShardCommand& c : Values()) same = a.Apply(c);
  REQUIRE(absl::IsFailedPrecondition(same));
  v1::ShardCommand next = Init();
  next.mutable_init()->set_job(2);
  REQUIRE(a.Apply(next).ok());
  for (const v1::ShardCommand& c : Values()) REQUIRE(a.Apply(c).ok());
  REQUIRE(shard.version() == 0);
  std::thread announcement_wait([&] {
    REQUIRE(AwaitState([&] { return clock.waiters() >= 1; }));
    clock.Advance(ShardCore::kAnnouncementWait);
  });
  REQUIRE(absl::IsNotFound(shard.Authenticate(7, "secret")));  // the last job's session ended
  announcement_wait.join();
  REQUIRE(a.CheckpointVersions().empty());  // moved aside, not mixed with the new job's
  REQUIRE(a.Apply(Step(0)).ok());
  REQUIRE(shard.version() == 1);
}

TEST_CASE(
    "a round ahead steps the slice as its members' slices come; a checkpoint of the version it left is the "
    "slice before the step",
    "[shard_apply]") {
  ShardCore shard({});
  ShardApplier a = Make(&shard);
  HoldSlice(a);
  REQUIRE(a.Apply(Session(7, "secret")).ok());
  v1::ShardCommand round;
  round.mutable_round_ahead()->set_version(0);
  round.mutable_round_ahead()->add_worker_ids(7);
  round.mutable_round_ahead()->set_learning_rate(0.1);
  round.mutable_round_ahead()->set_weigh_by_batch(true);
  REQUIRE(ShardApplier::MayBePassed(round));
  REQUIRE(a.Apply(round).ok());
  PushInfo push;
  push.id = 7;
  push.batch = 2;
  REQUIRE(shard.Push(push, std::vector<float>(Map().slice_elements(1), 1.0f), absl::InfinitePast()).ok());
  REQUIRE(shard.version() == 1);  // stepped ahead of the command
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(0);
  const std::vector<float> at0 = *shard.CaptureAt(0)->weights;
  REQUIRE(a.Apply(checkpoint).ok());  // the coordinator's capture came before its command
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{0});
  v1::ShardCommand step = Step(0);
  v1::ShardStepMember* m = step.mutable_step()->add_members();
  m->set_worker_id(7);
  m->set_model_version(0);
  m->set_weight(2);
  step.mutable_step()->set_update_scale(0.5);
  step.mutable_step()->set_learning_rate(0.1);
  REQUIRE(a.Apply(step).ok());  // the command confirms the step taken ahead
  REQUIRE(shard.version() == 1);
  checkpoint.mutable_checkpoint()->set_version(1);
  REQUIRE(a.Apply(checkpoint).ok());
  REQUIRE(a.CheckpointVersions() == std::vector<uint64_t>{1, 0});
  // Going back to version 0 restores the slice as it was before the step taken ahead.
  RestoreTo(a, shard, 0, at0);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
