#include "server/daemon/options.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/enum_names.h"
#include "common/etcd_client.h"
#include "common/flag_checks.h"
#include "common/shard_map.h"
#include "controller/controller_flags.h"

namespace omnilearn {
namespace server {
namespace {

absl::StatusOr<bool> OnOff(const std::string& flag, const std::string& value) {
  if (value == "on") return true;
  if (value == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": want on or off"));
}

absl::StatusOr<v1::WireDtype> WireDtypeFromFlag(const DaemonFlags& f) {
  const std::string wire = f.wire_dtype;
  std::optional<v1::WireDtype> dtype = ParseEnumName<v1::WireDtype>(wire);
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("--wire_dtype=", wire, ": want ",
                     absl::StrJoin(ShortEnumNames(*v1::WireDtype_descriptor(), /*skip_zero=*/false), " or ")));
  }
  return *dtype;
}

// The flags that name a choice (mode, controller, optimizer...), parsed into `o`.
absl::Status ParseChoices(const DaemonFlags& f, ServerOptions* o) {
  auto mode = ParseMode(f.mode);
  if (!mode.ok()) return mode.status();
  auto controller = controller::ControllerFromFlags();
  if (!controller.ok()) return controller.status();
  auto optimizer = ParseOptimizer(f.optimizer);
  if (!optimizer.ok()) return optimizer.status();
  const bool step_by_default = f.lr_decay_steps > 0 || f.lr_decay_epochs > 0;
  auto schedule = ParseLrSchedule(f.lr_schedule.empty() ? (step_by_default ? "step" : "constant") : f.lr_schedule);
  if (!schedule.ok()) return schedule.status();
  auto lr_scaling = OnOff("lr_scaling", f.lr_scaling);
  if (!lr_scaling.ok()) return lr_scaling.status();
  auto damping = OnOff("staleness_damping", f.staleness_damping);
  if (!damping.ok()) return damping.status();
  auto adam_sqrt = OnOff("adam_sqrt_scaling", f.adam_sqrt_scaling);
  if (!adam_sqrt.ok()) return adam_sqrt.status();
  auto prediction = OnOff("adam_weight_prediction", f.adam_weight_prediction);
  if (!prediction.ok()) return prediction.status();
  const std::string aggregation = f.aggregation;
  if (aggregation != "weighted" && aggregation != "mean") {
    return absl::InvalidArgumentError(absl::StrCat("--aggregation=", aggregation, ": want weighted or mean"));
  }
  o->mode = *mode;
  o->controller = controller->options;
  o->adjust_every = controller->adjust_every;
  o->optimizer.kind = *optimizer;
  o->optimizer.schedule = *schedule;
  o->async_rule.lr_scaling = *lr_scaling;
  o->async_rule.staleness_damping = *damping;
  o->async_rule.adam_sqrt_scaling = *adam_sqrt;
  o->async_rule.adam_weight_prediction = *prediction;
  o->aggregation = aggregation == "mean" ? ServerOptions::Aggregation::kMean : ServerOptions::Aggregation::kWeighted;
  return absl::OkStatus();
}

// torch.optim's default of `hp` for the optimizer (`fallback` for one that reads none): what
// --momentum, --beta1, --beta2 or --eps < 0 means, written out so that every shard, of any
// release, reads a value.
double RuleDefault(OptimizerKind kind, Hp hp, double fallback) {
  for (const auto& [read, value] : RuleOf(kind).hyper) {
    if (read == hp) return value;
  }
  return fallback;
}

// --optimizer_options: "name=value,..." (a flag as 0, 1, true or false).
absl::StatusOr<HyperMap> ParseOptimizerOptions(const std::string& text) {
  HyperMap out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const std::string name(absl::StripAsciiWhitespace(kv.first)), value(absl::StripAsciiWhitespace(kv.second));
    double v = 0;
    bool flag = false;
    if (absl::SimpleAtob(value, &flag) && !absl::SimpleAtod(value, &v))
      v = flag ? 1 : 0;
    else if (!absl::SimpleAtod(value, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--optimizer_options: '", item, "' is not name=number (e.g. nesterov=1,dampening=0)"));
    }
    out[name] = v;
  }
  return out;
}

}  // namespace

absl::Status CheckFlags(const DaemonFlags& f) {
  auto d = [](auto v) { return static_cast<double>(v); };
  return CheckFlagRanges({
      {"port", d(f.port), 0, 65535},
      {"shards", d(f.shards), 1, ShardMap::kMaxShards},
      {"partition_mb", f.partition_mb == 0 ? 1.0 : f.partition_mb, 4.0 / (1 << 20), 1 << 20},  // 0: automatic
      {"staleness_bound", d(f.staleness_bound), 0, 1e6},
      {"local_steps", d(f.local_steps), 1, 1e5},
      {"local_batch", d(f.local_batch), 0, 1e9},
      {"num_workers", d(f.num_workers), 1, 100000},
      {"start_timeout_s", d(f.start_timeout_s), 1, 7 * 86400},
      {"lr", f.lr, 1e-12, 100},
      {"momentum", f.momentum < 0 ? 0 : f.momentum, 0, 0.999999},        // < 0: torch.optim's default
      {"weight_decay", f.weight_decay < 0 ? 0 : f.weight_decay, 0, 10},  // < 0: torch.optim's default
      {"beta1", f.beta1 < 0 ? 0 : f.beta1, 0, 0.999999999},              // < 0: torch.optim's default
      {"beta2", f.beta2 < 0 ? 0 : f.beta2, 0, 0.999999999},
      {"eps", f.eps < 0 ? 1e-8 : f.eps, 1e-15, 1},  // < 0: torch.optim's default
      {"warmup_steps", d(f.warmup_steps), 0, 1e12},
      {"lr_decay_steps", d(f.lr_decay_steps), 0, 1e12},
      {"lr_decay_epochs", f.lr_decay_epochs, 0, 1e6},
      {"lr_decay", f.lr_decay, 1e-9, 1},
      {"cosine_steps", d(f.cosine_steps), 0, 1e12},
      {"lr_min", f.lr_min, 0, f.lr},
      {"clip_grad_norm", f.clip_grad_norm, 0, 1e9},
      {"round_timeout_s", f.round_timeout_s, 0.001, 86400},
      {"lease_s", f.lease_s, 0.01, 86400},
      {"stream_idle_timeout_s", f.stream_idle_timeout_s, 0.1, 86400},
      {"max_rpc_threads", static_cast<double>(f.max_rpc_threads), 16, 65536},
      {"metrics_port", d(f.metrics_port), 0, 65535},
      {"checkpoint_every_s", f.checkpoint_every_s, 0.01, 30 * 86400},
      {"checkpoint_keep", d(f.checkpoint_keep), 1, 1000},
      {"memory_checkpoint_every_s", f.memory_checkpoint_every_s, 0.01, 86400},
      {"progress_every_s", f.progress_every_s, 0, 86400},
      {"shutdown_grace_s", f.shutdown_grace_s, 0, 3600},
      {"max_model_bytes", d(f.max_model_bytes), 4, 1e15},
      {"election_ttl_s", f.election_ttl_s, 2, 600},
  });
}

absl::StatusOr<ServerOptions> OptionsFromFlags(const DaemonFlags& f, v1::WireDtype* wire_dtype) {
  if (absl::Status s = CheckFlags(f); !s.ok()) return s;
  if (f.local_steps > 1 && f.local_batch > 0) {
    return absl::InvalidArgumentError(
        "--local_steps and --local_batch: one or the other (the steps of a round, or the samples of a step)");
  }
  ServerOptions o;
  if (absl::Status s = ParseChoices(f, &o); !s.ok()) return s;
  absl::StatusOr<v1::WireDtype> wire = WireDtypeFromFlag(f);
  if (!wire.ok()) return wire.status();
  *wire_dtype = *wire;
  o.staleness_bound = f.staleness_bound;
  o.local_steps = f.local_steps;
  o.local_batch = f.local_batch;
  o.num_workers = f.num_workers;
  o.start_timeout = absl::Seconds(f.start_timeout_s);
  o.round_timeout = absl::Seconds(f.round_timeout_s);
  o.lease = absl::Seconds(f.lease_s);
  o.optimizer.learning_rate = f.lr;
  const OptimizerKind kind = o.optimizer.kind;
  o.optimizer.momentum = f.momentum >= 0 ? f.momentum : RuleDefault(kind, Hp::kMomentum, 0);
  o.optimizer.weight_decay =
      f.weight_decay >= 0 ? f.weight_decay : std::max(0.0, RuleOf(o.optimizer.kind).weight_decay);
  o.optimizer.beta1 = f.beta1 >= 0 ? f.beta1 : RuleDefault(kind, Hp::kBeta1, 0.9);
  o.optimizer.beta2 = f.beta2 >= 0 ? f.beta2 : RuleDefault(kind, Hp::kBeta2, 0.999);
  o.optimizer.eps = f.eps >= 0 ? f.eps : RuleDefault(kind, Hp::kEps, 1e-8);
  absl::StatusOr<HyperMap> hyper = ParseOptimizerOptions(f.optimizer_options);
  if (!hyper.ok()) return hyper.status();
  o.optimizer.hyper = *std::move(hyper);
  o.optimizer.warmup_steps = f.warmup_steps;
  o.optimizer.lr_decay_steps = f.lr_decay_steps;
  o.optimizer.lr_decay_epochs = f.lr_decay_epochs;
  o.optimizer.lr_decay = f.lr_decay;
  o.optimizer.cosine_steps = f.cosine_steps;
  o.optimizer.lr_min = f.lr_min;
  o.optimizer.clip_grad_norm = f.clip_grad_norm;
  o.data_seed = f.data_seed;
  o.max_model_bytes = f.max_model_bytes;
  o.reset_when_done = f.reset_when_done;
  o.log = [](const std::string& line) {
    std::printf("omnilearn_server: %s\n", line.c_str());
    std::fflush(stdout);
  };
  return o;
}

ServiceLimits LimitsFromFlags(const DaemonFlags& f) {
  ServiceLimits limits;
  limits.stream_idle_timeout = absl::Seconds(f.stream_idle_timeout_s);
  return limits;
}

absl::Status CheckShardable(const DaemonFlags& f, const ServerOptions& o) {
  if (absl::Status s = CheckElection(f); !s.ok()) return s;
  if (f.shards == 1) {
    if (f.push_slices_in_order) {
      return absl::InvalidArgumentError(
          "--push_slices_in_order needs --shards > 1: it orders the pushes of a sharded job's slices");
    }
    if (f.shard_steps_ahead) {
      return absl::InvalidArgumentError("--shard_steps_ahead needs --shards > 1: it steps a sharded job's slices");
    }
    return absl::OkStatus();
  }
  if (f.shard_steps_ahead && o.mode != Mode::kSync) {
    return absl::InvalidArgumentError("--shard_steps_ahead needs --mode=sync: it decides a round's step ahead");
  }
  if (f.shard_steps_ahead && o.optimizer.clip_grad_norm > 0) {
    return absl::InvalidArgumentError(
        "--shard_steps_ahead and --clip_grad_norm: a clipped step needs every slice's norm, which comes only with "
        "the round's data");
  }
  if (f.checkpoint_keep < 2) {
    return absl::InvalidArgumentError(
        "--shards > 1 needs --checkpoint_keep >= 2: the newest checkpoint may not be every shard's yet");
  }
  return absl::OkStatus();
}

absl::Status CheckElection(const DaemonFlags& f) {
  if (f.election.empty()) return absl::OkStatus();
  if (absl::StatusOr<EtcdTarget> t = ParseEtcdTarget(f.election); !t.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--election: ", t.status().message()));
  }
  if (f.shards < 2 || !f.replicate_slices) {
    return absl::InvalidArgumentError(
        "--election needs --shards > 1 and --replicate_slices: an elected coordinator takes the job from shard 1's "
        "replica of slice 0");
  }
  if (f.port == 0 && f.advertise.empty()) {
    return absl::InvalidArgumentError(
        "--election needs a fixed --port (or --advertise): the address is published "
        "before the server listens");
  }
  return absl::OkStatus();
}

int64_t PartitionBytes(const DaemonFlags& f) { return static_cast<int64_t>(f.partition_mb * (1 << 20)); }

std::string AdvertisedAddress(const DaemonFlags& f, int port) {
  if (!f.advertise.empty()) return f.advertise;
  std::string host = f.bind;
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    char name[256] = {0};
    host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace server
}  // namespace omnilearn
