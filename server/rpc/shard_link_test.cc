// A shard server's link alone, against a scripted coordinator: no network. What it says
// when it registers, how it applies the commands, and when it registers again or gives up.
#include "server/rpc/shard_link.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "common/await_state.h"
#include "common/shard_map.h"
#include "common/tensor_codec.h"
#include "server/rpc/shard_commands_testing.h"

namespace omnilearn {
namespace server {
namespace {

using testing::kPartition;
using testing::Map;
using testing::Step;

// What a coordinator sends a shard it accepts as slice 1: the init, the slice's values.
std::vector<v1::ShardCommand> Accept() {
  std::vector<v1::ShardCommand> out = {testing::Init(1)};
  for (v1::ShardCommand& c : testing::Values()) out.push_back(std::move(c));
  return out;
}

// One registration as the coordinator answers it: its commands, then the call's end;
// `before(n)`, when set, runs before command n is read.
struct Registration {
  std::vector<v1::ShardCommand> commands;
  grpc::Status end;
  std::function<void(size_t)> before;
};

// Answers registrations from a script; past its end, as a coordinator not there.
class ScriptedCoordinator {
 public:
  explicit ScriptedCoordinator(std::vector<Registration> script) : script_(std::move(script)) {}

  struct Call {
    v1::ShardHello hello;
    bool legacy;
  };
  std::vector<Call> calls;

  std::unique_ptr<grpc::ClientReaderInterface<v1::ShardCommand>> Open(const v1::ShardHello& hello, bool legacy) {
    const size_t n = calls.size();
    calls.push_back({hello, legacy});
    Registration r =
        n < script_.size() ? script_[n] : Registration{{}, grpc::Status(grpc::UNAVAILABLE, "no route"), nullptr};
    return std::make_unique<Reader>(std::move(r));
  }

 private:
  class Reader : public grpc::ClientReaderInterface<v1::ShardCommand> {
   public:
    explicit Reader(Registration r) : r_(std::move(r)) {}
    void WaitForInitialMetadata() override {}
    bool NextMessageSize(uint32_t* size) override {
      *size = 1 << 20;
      return true;
    }
    bool Read(v1::ShardCommand* c) override {
      if (next_ >= r_.commands.size()) return false;
      if (r_.before) r_.before(next_);
      *c = r_.commands[next_++];
      return true;
    }
    grpc::Status Finish() override { return r_.end; }

   private:
    Registration r_;
    size_t next_ = 0;
  };
  std::vector<Registration> script_;
};

struct Rig {
  // `resolve`: the coordinator elected (ShardLinkOptions::resolve_coordinator), when set.
  explicit Rig(std::vector<Registration> script, std::function<absl::StatusOr<std::string>()> resolve = nullptr)
      : coordinator(std::move(script)) {
    ShardLinkOptions o;
    o.coordinator = "coordinator:7000";
    o.resolve_coordinator = std::move(resolve);
    o.address = "shard-1:7001";
    o.shards = 2;
    o.partition_bytes = kPartition;
    o.start_timeout = absl::Seconds(5);
    o.log = [this](const std::string& line) { lines.push_back(line); };
    o.open = [this](grpc::ClientContext*, const v1::ShardHello& hello, bool legacy) {
      return coordinator.Open(hello, legacy);
    };
    o.clock = &clock;
    link = std::make_unique<ShardLink>(std::move(o), &shard);
  }
  FakeClock clock;
  ScriptedCoordinator coordinator;
  ShardCore shard{{&clock, nullptr}};  // a step's wait for its members on the rig's clock
  std::vector<std::string> lines;
  std::unique_ptr<ShardLink> link;
};

TEST_CASE("the link registers, applies the coordinator's commands in order and ends with the job", "[shard_link]") {
  std::vector<v1::ShardCommand> commands = Accept();
  commands.push_back(Step(0));
  commands.push_back(Step(1));
  Rig rig({{commands, grpc::Status::OK}});
  REQUIRE(rig.link->Run().ok());
  REQUIRE(rig.coordinator.calls.size() == 1);
  const v1::ShardHello& hello = rig.coordinator.calls[0].hello;
  REQUIRE(hello.address() == "shard-1:7001");
  REQUIRE(hello.shards() == 2);
  REQUIRE(hello.partition_bytes() == kPartition);
  REQUIRE(hello.index() == 0);        // any free slice
  REQUIRE(hello.fingerprint() == 0);  // none held yet
  REQUIRE_FALSE(rig.coordinator.calls[0].legacy);
  REQUIRE(rig.shard.initialized());
  REQUIRE(rig.shard.version() == 2);
}

TEST_CASE("a coordinator of the previous release is found by UNIMPLEMENTED and asked the old way", "[shard_link]") {
  Rig rig({{{}, grpc::Status(grpc::UNIMPLEMENTED, "unknown service")}, {Accept(), grpc::Status::OK}});
  REQUIRE(rig.link->Run().ok());
  REQUIRE(rig.coordinator.calls.size() == 2);
  REQUIRE_FALSE(rig.coordinator.calls[0].legacy);
  REQUIRE(rig.coordinator.calls[1].legacy);
  REQUIRE(rig.lines.size() == 2);
  REQUIRE(rig.lines[0] == "the coordinator is of the previous release: registering through ParameterServer");
  REQUIRE(absl::StartsWith(rig.lines[1], "holding slice 1 of the model"));
  REQUIRE(rig.shard.initialized());
}

TEST_CASE("asked back to a checkpoint, or cut off, the link registers again naming its map; unanswered, it gives up",
          "[shard_link]") {
  Rig rig({{Accept(), grpc::Status(grpc::ABORTED, "back to version 0")},
           {Accept(), grpc::Status(grpc::UNAVAILABLE, "connection reset")}});
  const absl::Time start = rig.clock.Now();
  const absl::Status s = rig.link->Run();
  INFO(s.ToString());
  REQUIRE(absl::IsUnavailable(s));
  REQUIRE(absl::StrContains(s.message(), "the coordinator coordinator:7000 did not answer in 5s: no route"));
  REQUIRE(rig.coordinator.calls.size() >= 3);
  REQUIRE(rig.coordinator.calls[1].hello.fingerprint() == Map().fingerprint());  // the slice it holds
  REQUIRE(rig.coordinator.calls[1].hello.index() == 1);  // asked for by its index, not "any free"
  REQUIRE(rig.lines.size() == 4);                        // each registration's "holding slice 1" after its values
  REQUIRE(rig.lines[1] == "the coordinator asks: back to version 0");
  REQUIRE(absl::StartsWith(rig.lines[3], "lost the link to the coordinator coordinator:7000: connection reset"));
  // Lost after registering: start_timeout from the loss, attempts a second apart.
  REQUIRE(rig.clock.Now() - start == absl::Seconds(5));
  REQUIRE(rig.coordinator.calls.size() == 2 + 5);
}

TEST_CASE("a shard of an elected coordinator asks where it is before each registration", "[shard_link]") {
  std::vector<absl::StatusOr<std::string>> answers = {
      absl::NotFoundError("no coordinator holds /omnilearn/job"),  // none elected yet: asked again
      std::string("coord-a:7000"), std::string("coord-b:7000"),
      absl::FailedPreconditionError("the job of the etcd key /omnilearn/job is finished")};
  size_t asked = 0;
  Rig rig({{Accept(), grpc::Status(grpc::UNAVAILABLE, "connection reset")}, {{}, grpc::Status(grpc::UNAVAILABLE, "")}},
          [&]() -> absl::StatusOr<std::string> { return answers[std::min(asked++, answers.size() - 1)]; });
  const absl::Status s = rig.link->Run();
  INFO(s.ToString());
  // The finished job ends the link with its message; each registration went where etcd said.
  REQUIRE(absl::IsFailedPrecondition(s));
  REQUIRE(absl::StrContains(s.message(), "is finished"));
  REQUIRE(rig.coordinator.calls.size() == 2);
  REQUIRE(std::count(rig.lines.begin(), rig.lines.end(), "the coordinator is coord-a:7000") == 1);
  REQUIRE(std::count(rig.lines.begin(), rig.lines.end(), "the coordinator is coord-b:7000") == 1);
  REQUIRE(std::any_of(rig.lines.begin(), rig.lines.end(), [](const std::string& l) {
    return absl::StartsWith(l, "lost the link to the coordinator coord-a:7000: connection reset");
  }));
}

v1::ShardCommand Session(WorkerId id, const std::string& secret) {
  v1::ShardCommand c;
  c.mutable_session()->set_worker_id(id);
  c.mutable_session()->set_session_secret(secret);
  return c;
}

// A recovery begun by another shard's return can take this registration back before the
// coordinator sent it anything: the shard registers again, it does not end (partition_test's
// "partial" case once ended a shard this way, and the job waited for its slice for good).
TEST_CASE("asked to register again before any command, the link registers again", "[shard_link]") {
  Rig rig({{{},
            grpc::Status(grpc::ABORTED,
                         "register again: the job goes back to the shards' newest common "
                         "checkpoint")},
           {Accept(), grpc::Status::OK}});
  const absl::Status s = rig.link->Run();
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(rig.coordinator.calls.size() == 2);
  REQUIRE(rig.lines[0] ==
          "the coordinator asks: register again: the job goes back to the shards' newest common "
          "checkpoint");
  REQUIRE(rig.shard.version() == 0);  // the second registration's slice
}

TEST_CASE("a session opened while a step waits for a member's slice is let in at once", "[shard_link]") {
  // Worker 7 is in the step from version 0, and its slice never comes: the step waits
  // member_wait (5 s on the rig's clock), a checkpoint queued behind it. Worker 8 joins
  // meanwhile.
  std::vector<v1::ShardCommand> commands = Accept();
  commands.push_back(Session(7, "secret-7"));
  v1::ShardCommand step = Step(0);
  v1::ShardStepMember* member = step.mutable_step()->add_members();
  member->set_worker_id(7);
  member->set_weight(1);
  commands.push_back(step);
  v1::ShardCommand checkpoint;  // a checkpoint of the step's version, queued behind it
  checkpoint.mutable_checkpoint()->set_version(1);
  commands.push_back(checkpoint);
  const size_t opening = commands.size();
  commands.push_back(Session(8, "secret-8"));
  Rig* rig_seen = nullptr;
  bool step_waited = false;
  auto before = [&](size_t n) {
    if (n != opening) return;
    // The coordinator sends the opening once the step is waiting.
    step_waited = AwaitState([&] { return rig_seen->clock.waiters() > 0; });
  };
  Rig rig({{commands, grpc::Status::OK, before}});
  rig_seen = &rig;
  absl::Status run;
  std::thread link([&] { run = rig.link->Run(); });
  // Worker 8 is known while the step still waits, not once it ended.
  const bool known_while_waiting = AwaitState([&] { return rig.shard.HasSession(8); }) && rig.shard.version() == 0;
  rig.clock.Advance(absl::Seconds(6));  // past member_wait: the step fails, the link registers again
  link.join();
  REQUIRE(step_waited);
  REQUIRE(known_while_waiting);
  INFO(run.ToString());
  REQUIRE(absl::IsUnavailable(run));  // the script's coordinator is gone after the step's failure
  REQUIRE(rig.shard.version() == 0);  // a sync step without its member is not taken
}

TEST_CASE("a slice that disagrees with the coordinator on its version registers again and is restored",
          "[shard_link]") {
  // The coordinator checkpoints version 0, steps to 1, then sends the step from version 0
  // again (a step this slice took that the coordinator undid, or one it missed): the slice
  // cannot take it. It registers again naming its checkpoint; the coordinator restores it.
  std::vector<v1::ShardCommand> first = Accept();
  v1::ShardCommand checkpoint;
  checkpoint.mutable_checkpoint()->set_version(0);
  first.push_back(checkpoint);
  first.push_back(Step(0));
  first.push_back(Step(0));
  v1::ShardCommand restore = testing::Init(1);
  restore.mutable_init()->set_restore(true);
  Rig rig({{first, grpc::Status::OK}, {{restore, Step(0)}, grpc::Status::OK}});
  const absl::Status s = rig.link->Run();
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(rig.coordinator.calls.size() == 2);
  const v1::ShardHello& again = rig.coordinator.calls[1].hello;
  REQUIRE(again.index() == 1);
  REQUIRE(std::vector<uint64_t>(again.checkpoint_versions().begin(), again.checkpoint_versions().end()) ==
          std::vector<uint64_t>{0});
  REQUIRE(std::count_if(rig.lines.begin(), rig.lines.end(), [](const std::string& l) {
            return absl::StrContains(l, "a step was missed: registering again");
          }) == 1);
  REQUIRE(rig.shard.version() == 1);  // restored to 0, then the step taken once
}

TEST_CASE("a refusal, or a command the shard cannot apply, ends the link with its error", "[shard_link]") {
  Rig refused({{{}, grpc::Status(grpc::PERMISSION_DENIED, "wrong peer token")}});
  const absl::Status s = refused.link->Run();
  REQUIRE(absl::IsPermissionDenied(s));
  REQUIRE(s.message() == "wrong peer token");
  REQUIRE(refused.coordinator.calls.size() == 1);

  Rig unapplicable({{{Step(0)}, grpc::Status::OK}});  // a step before any init
  const absl::Status bad = unapplicable.link->Run();
  INFO(bad.ToString());
  REQUIRE(absl::IsFailedPrecondition(bad));
  REQUIRE(bad.message() == "a step before the slice's first values");
  REQUIRE(unapplicable.coordinator.calls.size() == 1);
  REQUIRE_FALSE(unapplicable.shard.initialized());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
