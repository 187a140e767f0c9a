// The server's options from given flag values: no process flags, no network.
#include "server/daemon/options.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "common/shard_map.h"

namespace omnilearn {
namespace server {
namespace {

absl::StatusOr<ServerOptions> Options(const DaemonFlags& f) {
  v1::WireDtype wire = v1::WIRE_DTYPE_F32;
  return OptionsFromFlags(f, &wire);
}

std::string Refusal(const DaemonFlags& f) {
  absl::StatusOr<ServerOptions> o = Options(f);
  REQUIRE_FALSE(o.ok());
  return std::string(o.status().message());
}

TEST_CASE("the flags' defaults make a sync job; each value lands in its option", "[daemon]") {
  DaemonFlags f;
  absl::StatusOr<ServerOptions> o = Options(f);
  REQUIRE(o.ok());
  REQUIRE(o->mode == Mode::kSync);
  REQUIRE(o->optimizer.learning_rate == 0.05);
  REQUIRE(o->round_timeout == absl::Seconds(30));
  f.mode = "async";
  f.optimizer = "adamw";
  f.lr = 0.003;
  f.beta1 = 0.8;
  f.adam_sqrt_scaling = "off";
  f.adam_weight_prediction = "off";
  f.lr_decay_epochs = 2;  // a step schedule unless one is named
  f.wire_dtype = "bf16";
  v1::WireDtype wire = v1::WIRE_DTYPE_F32;
  o = OptionsFromFlags(f, &wire);
  REQUIRE(o.ok());
  REQUIRE(o->mode == Mode::kAsync);
  REQUIRE(o->optimizer.kind == OptimizerKind::kAdamW);
  REQUIRE(o->optimizer.beta1 == 0.8);
  REQUIRE(o->optimizer.schedule == LrSchedule::kStep);
  REQUIRE_FALSE(o->async_rule.adam_sqrt_scaling);
  REQUIRE_FALSE(o->async_rule.adam_weight_prediction);
  REQUIRE(wire == v1::WIRE_DTYPE_BF16);
}

TEST_CASE("--optimizer_options: the optimizer's other options by torch.optim's names", "[daemon]") {
  DaemonFlags f;
  f.optimizer = "rmsprop";
  f.momentum = 0.9;
  f.optimizer_options = "centered=true, alpha=0.9";
  absl::StatusOr<ServerOptions> o = Options(f);
  REQUIRE(o.ok());
  REQUIRE(o->optimizer.kind == OptimizerKind::kRMSprop);
  REQUIRE(o->optimizer.hyper == HyperMap{{"alpha", 0.9}, {"centered", 1}});
  REQUIRE(o->optimizer.eps == 1e-8);  // torch.optim's default for RMSprop
  f.optimizer = "adadelta";
  f.optimizer_options = "";
  REQUIRE(Options(f)->optimizer.eps == 1e-6);
  f.optimizer = "rmsprop";
  f.optimizer_options = "centered=true, alpha=0.9";
  REQUIRE(ValidateOptimizerOptions(o->optimizer).ok());
  f.optimizer_options = "rho=0.9";
  REQUIRE(absl::StrContains(ValidateOptimizerOptions(Options(f)->optimizer).message(), "RMSprop has no option 'rho'"));
  f.optimizer_options = "alpha";
  REQUIRE(absl::StrContains(Refusal(f), "'alpha' is not name=number"));
  f.optimizer = "rprop";
  f.optimizer_options = "";
  REQUIRE(Options(f)->optimizer.weight_decay == 0);  // Rprop has none
  f.optimizer = "adafactor";  // a sharded job's map then cuts no tensor (ShardMap's whole_tensors)
  f.shards = 2;
  f.checkpoint_keep = 2;
  REQUIRE(CheckShardable(f, *Options(f)).ok());
}

TEST_CASE("a value out of range or a choice not offered is refused, naming the flag", "[daemon]") {
  DaemonFlags f;
  f.lr = 0;
  REQUIRE(absl::StrContains(Refusal(f), "lr"));
  f = DaemonFlags();
  f.mode = "bogus";
  REQUIRE(absl::StrContains(Refusal(f), "bogus"));
  f = DaemonFlags();
  f.staleness_damping = "maybe";
  REQUIRE(absl::StrContains(Refusal(f), "--staleness_damping=maybe: want on or off"));
  f = DaemonFlags();
  f.wire_dtype = "f16";
  REQUIRE(absl::StrContains(Refusal(f), "--wire_dtype=f16"));
  f = DaemonFlags();
  f.aggregation = "median";
  REQUIRE(absl::StrContains(Refusal(f), "want weighted or mean"));
  f = DaemonFlags();
  f.lr_min = 1;  // above --lr
  REQUIRE(absl::StrContains(Refusal(f), "lr_min"));
  f = DaemonFlags();
  f.local_steps = 8;
  f.local_batch = 16;
  REQUIRE(absl::StrContains(Refusal(f), "--local_steps and --local_batch: one or the other"));
}

TEST_CASE("a sharded job takes every flag one server takes; checkpoints need two kept", "[daemon]") {
  DaemonFlags f;
  f.shards = 2;
  ServerOptions o = *Options(f);
  REQUIRE(CheckShardable(f, o).ok());
  o.optimizer.clip_grad_norm = 1;  // the norm is reduced over the slices
  o.reset_when_done = true;        // every shard takes the next job's slice
  REQUIRE(CheckShardable(f, o).ok());
  o = *Options(f);
  f.checkpoint_dir = "/tmp/x";
  f.checkpoint_keep = 1;
  REQUIRE(absl::StrContains(CheckShardable(f, o).message(), "--checkpoint_keep >= 2"));
  f.shards = 1;  // one server: nothing to refuse
  REQUIRE(CheckShardable(f, o).ok());
  f.push_slices_in_order = true;  // but no slices to order
  REQUIRE(absl::StrContains(CheckShardable(f, o).message(), "--push_slices_in_order needs --shards > 1"));
  f.shards = 2;
  f.checkpoint_dir.clear();  // checkpoints in memory: two kept all the same
  REQUIRE(absl::StrContains(CheckShardable(f, o).message(), "--checkpoint_keep >= 2"));
  f.checkpoint_keep = 2;
  REQUIRE(CheckShardable(f, o).ok());
}

TEST_CASE("--shard_steps_ahead: a sharded sync job without clipping", "[daemon]") {
  DaemonFlags f;
  f.shard_steps_ahead = true;
  ServerOptions o = *Options(f);
  REQUIRE(absl::StrContains(CheckShardable(f, o).message(), "--shard_steps_ahead needs --shards > 1"));
  f.shards = 2;
  REQUIRE(CheckShardable(f, o).ok());
  o.optimizer.clip_grad_norm = 1;
  REQUIRE(absl::StrContains(CheckShardable(f, o).message(), "a clipped step needs every slice's norm"));
  o = *Options(f);
  o.mode = Mode::kAsync;
  REQUIRE(absl::StrContains(CheckShardable(f, o).message(), "--shard_steps_ahead needs --mode=sync"));
}

TEST_CASE("--election: a sharded job's candidate with slice 0's replica and a fixed address", "[daemon]") {
  DaemonFlags f;
  f.election = "etcd://10.0.0.9:2379/jobs/a";
  f.shards = 3;
  REQUIRE(CheckElection(f).ok());
  f.election = "10.0.0.9:2379";
  REQUIRE_THAT(std::string(CheckElection(f).message()),
               Catch::Contains("--election: \"10.0.0.9:2379\" is not etcd://"));
  f.election = "etcd://10.0.0.9:2379";
  f.shards = 1;
  REQUIRE_THAT(std::string(CheckElection(f).message()), Catch::Contains("needs --shards > 1 and --replicate_slices"));
  f.shards = 3;
  f.replicate_slices = false;
  REQUIRE_THAT(std::string(CheckElection(f).message()), Catch::Contains("needs --shards > 1 and --replicate_slices"));
  f.replicate_slices = true;
  f.port = 0;
  REQUIRE_THAT(std::string(CheckElection(f).message()), Catch::Contains("needs a fixed --port"));
  f.advertise = "coordinator-b:50051";
  REQUIRE(CheckElection(f).ok());
}

TEST_CASE("the address a sharded server advertises, and its partitions' size", "[daemon]") {
  DaemonFlags f;
  f.bind = "127.0.0.1";
  REQUIRE(AdvertisedAddress(f, 5000) == "127.0.0.1:5000");
  f.advertise = "node7:6000";
  REQUIRE(AdvertisedAddress(f, 5000) == "node7:6000");
  f.bind = "0.0.0.0";
  f.advertise = "";
  REQUIRE_FALSE(absl::StartsWith(AdvertisedAddress(f, 5000), "0.0.0.0"));  // the host's name instead
  REQUIRE(PartitionBytes(f) == ShardMap::kAutoPartitionBytes);             // the default: chosen from the model
  f.partition_mb = 4;
  REQUIRE(PartitionBytes(f) == int64_t{4} << 20);
  REQUIRE(CheckFlags(f).ok());
  f.partition_mb = 1.0 / (1 << 20);  // one byte: not a parameter's
  REQUIRE(absl::StrContains(CheckFlags(f).message(), "--partition_mb"));
  f.partition_mb = -1;
  REQUIRE_FALSE(CheckFlags(f).ok());
  REQUIRE(LimitsFromFlags(f).stream_idle_timeout == absl::Seconds(60));
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
