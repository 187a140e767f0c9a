// The server-to-server wire: what a coordinator writes, a shard reads back; what a
// coordinator of an earlier release wrote, a shard still reads.
#include "server/rpc/shard_wire.h"

#include <cmath>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

// ShardOptimizer.kind is deprecated; this file is what a coordinator of the previous release sends.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("the optimizer travels as an enum, the string kept for shards of the previous release", "[shard_wire]") {
  OptimizerOptions adamw;
  adamw.kind = OptimizerKind::kAdamW;
  adamw.beta1 = 0.8;
  v1::ShardOptimizer p = OptimizerToProto(adamw, absl::Seconds(5));
  REQUIRE(p.optimizer() == v1::OPTIMIZER_KIND_ADAMW);
  REQUIRE(p.kind() == "adamw");
  OptimizerOptions back;
  REQUIRE(OptimizerFromProto(p, &back).ok());
  REQUIRE(back.kind == OptimizerKind::kAdamW);
  REQUIRE(back.beta1 == 0.8);
  // A coordinator of an earlier release writes the string alone.
  p.clear_optimizer();
  p.set_kind("adam");
  REQUIRE(OptimizerFromProto(p, &back).ok());
  REQUIRE(back.kind == OptimizerKind::kAdam);
  // One of a later release, with a kind this shard does not know.
  p.set_optimizer(static_cast<v1::OptimizerKind>(99));
  const absl::Status later = OptimizerFromProto(p, &back);
  REQUIRE(absl::IsInvalidArgument(later));
  REQUIRE(absl::StrContains(later.message(), "later release"));
}

TEST_CASE("a worker's optimizer reaches the shards: every option, its groups by name, each group's rate",
          "[shard_wire]") {
  OptimizerOptions rms;
  rms.kind = OptimizerKind::kRMSprop;
  rms.hyper = {{"centered", 1}, {"alpha", 0.9}};
  rms.groups = {{{0}, 0.01, 0.1, {}, {"fc.weight"}}, {{1}, 0.02, 0, {{"momentum", 0.5}}, {"fc.bias"}}};
  OptimizerOptions back;
  REQUIRE(OptimizerFromProto(OptimizerToProto(rms, absl::Seconds(5)), &back).ok());
  REQUIRE(back.kind == OptimizerKind::kRMSprop);
  REQUIRE(back.hyper == rms.hyper);
  REQUIRE(back.groups.size() == 2);
  REQUIRE(back.groups[1].names == std::vector<std::string>{"fc.bias"});
  REQUIRE(back.groups[1].hyper == HyperMap{{"momentum", 0.5}});
  // The shard's slice holds pieces named tensor@begin: each goes in its tensor's group.
  const ModelLayout slice = *ModelLayout::Create({{"fc.weight@0", {6}}, {"fc.weight@6", {6}}, {"fc.bias@0", {2}}});
  REQUIRE(ResolveGroupNames(slice, /*pieces=*/true, &back.groups).ok());
  REQUIRE(back.groups[0].tensors == std::vector<int>{0, 1});
  REQUIRE(back.groups[1].tensors == std::vector<int>{2});
  // A whole model's layout names every tensor of the groups.
  REQUIRE(absl::StrContains(ResolveGroupNames(slice, /*pieces=*/false, &back.groups).message(), "not in the model"));
  ReplicatedStep step;
  step.version = 3;
  step.settings.learning_rate = 0.01;
  step.settings.group_rates = {0.01, 0.02};
  REQUIRE(StepFromProto(StepToProto(step)).settings.group_rates == step.settings.group_rates);
}

TEST_CASE("a step's sample share travels; a coordinator of an earlier release sends none: a whole step",
          "[shard_wire]") {
  ReplicatedStep step;
  step.version = 7;
  step.members = {{3, 6, 0.25}};
  step.settings.learning_rate = 0.01;
  step.settings.momentum = 0.4;
  step.settings.momentum_cut = 0.5;
  step.settings.sample_share = 0.25;
  v1::ShardStep p = StepToProto(step);
  auto check = [](const v1::ShardStep& s) {
    v1::ShardCommand command;
    *command.mutable_step() = s;
    return CheckShardCommand(command);
  };
  REQUIRE(check(p).ok());
  ReplicatedStep back = StepFromProto(p);
  REQUIRE(back.settings.sample_share == 0.25);
  REQUIRE(back.settings.momentum == 0.4);
  REQUIRE(back.settings.momentum_cut == 0.5);
  REQUIRE(back.members.size() == 1);
  step.settings.momentum.reset();  // the optimizer's own: -1 on the wire, none again
  REQUIRE(StepToProto(step).momentum() == -1);
  REQUIRE_FALSE(StepFromProto(StepToProto(step)).settings.momentum.has_value());
  p.clear_sample_share();
  REQUIRE(StepFromProto(p).settings.sample_share == 1.0);
  p.set_sample_share(1.5);
  REQUIRE(absl::StrContains(check(p).message(), "sample_share"));
  p.set_sample_share(0.25);
  step.predict_steps = 3;  // async Adam with 4 live workers: the slice served 3 steps ahead
  REQUIRE(StepFromProto(StepToProto(step)).predict_steps == 3);
  p.set_predict_steps(-1);
  REQUIRE(absl::StrContains(check(p).message(), "predict_steps"));
  p.set_predict_steps(std::nan(""));
  REQUIRE(absl::StrContains(check(p).message(), "predict_steps"));
  p.clear_predict_steps();  // an earlier coordinator: the slice as it is
  REQUIRE(check(p).ok());
  REQUIRE(StepFromProto(p).predict_steps == 0);
}

TEST_CASE("the coordinator's commands and a shard's hello, each way", "[shard_wire]") {
  v1::ShardHello hello;
  hello.set_address("s:1");
  hello.set_shards(3);
  hello.set_partition_bytes(64);
  hello.set_index(2);
  hello.add_checkpoint_versions(9);
  hello.add_checkpoint_versions(4);
  hello.set_fingerprint(0xfeed);
  hello.set_reduces_norm(true);
  hello.set_steps_ahead(true);
  const ShardRegistration r = RegistrationFromProto(hello);
  REQUIRE(r.address == "s:1");
  REQUIRE(r.shards == 3);
  REQUIRE(r.partition_bytes == 64);
  REQUIRE(r.index == 2);
  REQUIRE(r.checkpoint_versions == std::vector<uint64_t>{9, 4});
  REQUIRE(r.fingerprint == 0xfeed);
  REQUIRE(r.reduces_norm);
  REQUIRE_FALSE(r.resets_jobs);
  REQUIRE(r.steps_ahead);
  for (int i = 0; i < 3 * kMaxShardCheckpoints; ++i) hello.add_checkpoint_versions(i);
  REQUIRE(RegistrationFromProto(hello).checkpoint_versions.size() == kMaxShardCheckpoints + 1);  // still refused

  ShardInitCommand init;
  init.index = 2;
  init.layout = *ModelLayout::Create({{"a", {4}}});
  init.version = 7;
  init.fingerprint = 0xfeed;
  init.member_wait = absl::Seconds(5);
  init.restore = true;
  init.job = 3;
  const v1::ShardCommand i = CommandToProto(init);
  REQUIRE(i.init().index() == 2);
  REQUIRE(i.init().layout().tensors_size() == 1);
  REQUIRE(i.init().version() == 7);
  REQUIRE(i.init().fingerprint() == 0xfeed);
  REQUIRE(i.init().optimizer().round_timeout_seconds() == 5);
  REQUIRE(i.init().sync());
  REQUIRE(i.init().restore());
  REQUIRE(i.init().job() == 3);
  const v1::ShardCommand opened = CommandToProto(ShardSessionCommand{7, "secret", false});
  REQUIRE(opened.session().worker_id() == 7);
  REQUIRE(opened.session().session_secret() == "secret");
  REQUIRE_FALSE(opened.session().closed());
  const v1::ShardCommand closed = CommandToProto(ShardSessionCommand{7, "secret", true});
  REQUIRE(closed.session().closed());
  REQUIRE(closed.session().session_secret().empty());  // a closed session's secret does not travel
  ReplicatedStep step;
  step.version = 4;
  step.members = {{7, 4, 2.0}};
  REQUIRE(StepFromProto(CommandToProto(step).step()).members.at(0).weight == 2.0);
  RoundAhead round;
  round.version = 5;
  round.members = {7, 8};
  round.learning_rate = 0.05;
  round.weigh_by_batch = false;
  const v1::ShardCommand ahead = CommandToProto(round);
  REQUIRE(CheckShardCommand(ahead).ok());
  const RoundAhead back = RoundAheadFromProto(ahead.round_ahead());
  REQUIRE(back.version == 5);
  REQUIRE(back.members == std::vector<WorkerId>{7, 8});
  REQUIRE(back.learning_rate == 0.05);
  REQUIRE_FALSE(back.weigh_by_batch);
  v1::ShardCommand bad = ahead;
  bad.mutable_round_ahead()->set_learning_rate(-1);
  REQUIRE(absl::StrContains(CheckShardCommand(bad).message(), "round_ahead.learning_rate"));
  bad = ahead;
  for (int i = 0; i < kMaxStepMembers; ++i) bad.mutable_round_ahead()->add_worker_ids(i);
  REQUIRE(absl::StrContains(CheckShardCommand(bad).message(), "round ahead names"));
  const v1::ShardCommand checkpoint = CommandToProto(ShardCheckpointCommand{5, 0xabc});
  REQUIRE(checkpoint.checkpoint().version() == 5);
  REQUIRE(checkpoint.checkpoint().history() == 0xabc);
  REQUIRE(CommandToProto(std::monostate()).kind_case() == v1::ShardCommand::KIND_NOT_SET);
  for (const v1::ShardCommand& c : {i, opened, closed, checkpoint}) REQUIRE(CheckShardCommand(c).ok());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
