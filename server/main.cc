// omnilearn_server: the OmniLearn parameter-server daemon.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <optional>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/enum_names.h"
#include "common/flag_checks.h"
#include "common/grpc_security.h"
#include "common/large_buffers.h"
#include "common/metrics.h"
#include "common/metrics_exposer.h"
#include "common/shard_map.h"
#include "common/tensor_codec.h"
#include "controller/controller_flags.h"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/checkpointer.h"
#include "server/control/coordinator_shards.h"
#include "server/control/parameter_server_core.h"
#include "server/daemon/summary.h"
#include "server/rpc/service.h"
#include "server/rpc/shard_link.h"
#include "server/rpc/shard_wire.h"

ABSL_FLAG(int, port, 50051, "gRPC port");
ABSL_FLAG(std::string, bind, "0.0.0.0", "address to listen on");
ABSL_FLAG(int, shards, 1,
          "the job's parameters are cut over this many servers: this one (the coordinator, slice 0) and "
          "shards - 1 shard servers started with --coordinator (docs/SHARDING.md)");
ABSL_FLAG(double, partition_mb, 4, "sharded jobs: the model's partitions hold at most this many MB");
ABSL_FLAG(std::string, coordinator, "",
          "HOST:PORT: run as a shard server of that coordinator's job (holding one slice of the model)");
ABSL_FLAG(int, shard_index, 0, "with --coordinator: the slice to hold (1..shards-1; 0 = any free one)");
ABSL_FLAG(std::string, advertise, "",
          "HOST:PORT workers reach this server at (sharded jobs; default: --bind:--port, or the host name when "
          "--bind is 0.0.0.0)");
ABSL_FLAG(std::string, mode, "sync", "sync | async | ssp (stale-synchronous, see --staleness_bound)");
ABSL_FLAG(int, staleness_bound, 4, "ssp: iterations a worker may run ahead of the slowest (0 = lockstep)");
ABSL_FLAG(int, num_workers, 1, "workers the first round waits for");
ABSL_FLAG(int, start_timeout_s, 300, "start without the missing workers after this many seconds");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd | adam | adamw");
ABSL_FLAG(std::string, aggregation, "weighted",
          "sync: weighted (each push by its batch) | mean (every push once: an ablation)");
ABSL_FLAG(std::string, lr_scaling, "on", "async/ssp: on (a push's step scales with b/B) | off (1/n each: ablation)");
ABSL_FLAG(std::string, staleness_damping, "on",
          "async/ssp: on (stale pushes damped, momentum lowered) | off (plain async: ablation)");
ABSL_FLAG(std::string, adam_sqrt_scaling, "on",
          "async/ssp with adam or adamw: on (a push of b samples is its b/B share of a global-batch step: "
          "the square-root rule, the sync --lr works) | off (each push a full Adam step at lr * b/B: ablation)");
ABSL_FLAG(double, lr, 0.05, "learning rate of one step on a global batch");
ABSL_FLAG(double, momentum, 0.9, "sgd: momentum");
ABSL_FLAG(double, weight_decay, 1e-4, "weight decay (sgd, adam: L2 on the gradient; adamw: decoupled)");
ABSL_FLAG(double, beta1, 0.9, "adam, adamw: first-moment decay");
ABSL_FLAG(double, beta2, 0.999, "adam, adamw: second-moment decay");
ABSL_FLAG(double, eps, 1e-8, "adam, adamw: denominator epsilon");
ABSL_FLAG(std::string, lr_schedule, "",
          "constant | step (x --lr_decay every --lr_decay_steps versions or --lr_decay_epochs epochs) | cosine (to "
          "--lr_min over "
          "--cosine_steps); default: step when --lr_decay_steps or --lr_decay_epochs > 0, else constant");
ABSL_FLAG(uint64_t, warmup_steps, 0, "versions of linear learning-rate warm-up before the schedule (0 = none)");
ABSL_FLAG(uint64_t, lr_decay_steps, 0, "step schedule: versions between decays");
ABSL_FLAG(double, lr_decay_epochs, 0,
          "step schedule in epochs instead: x --lr_decay every this many epochs (samples trained / the data set's "
          "size: for workers that give their data set)");
ABSL_FLAG(double, lr_decay, 0.1, "step schedule: decay factor");
ABSL_FLAG(uint64_t, cosine_steps, 0, "cosine schedule: versions from --lr to --lr_min (after warm-up)");
ABSL_FLAG(double, lr_min, 0, "cosine schedule: the final learning rate");
ABSL_FLAG(double, clip_grad_norm, 0, "clip the global gradient norm of each step to this (0 = off)");
ABSL_FLAG(int64_t, max_model_bytes, int64_t{4} << 30,
          "the largest model (float32 bytes) a worker may bring; larger joins are refused before any allocation");
ABSL_FLAG(uint64_t, data_seed, 1,
          "seed of the epochs' sample permutations (the server assigns every worker's samples)");
ABSL_FLAG(std::string, wire_dtype, "f32",
          "values of gradients and models on the wire for workers that can use it: f32 | bf16 (half the bytes; the "
          "server keeps float32 master weights and optimizer state; workers keep the rounding error and send it "
          "with their next gradient)");
ABSL_FLAG(double, round_timeout_s, 30, "sync/ssp: seconds to wait for a late worker before dropping it");
ABSL_FLAG(double, lease_s, 60, "seconds without a call after which a worker is gone");
// The names of earlier releases, kept for one release (a warning says the new name).
ABSL_FLAG(std::optional<double>, round_timeout, std::nullopt, "deprecated: --round_timeout_s");
ABSL_FLAG(std::optional<double>, lease, std::nullopt, "deprecated: --lease_s");
ABSL_FLAG(double, stream_idle_timeout_s, 60,
          "a Join/Push stream that sends nothing for this long is cancelled (stalled or hostile callers)");
ABSL_FLAG(int, max_rpc_threads, 1024, "calls served at once; beyond them a call gets RESOURCE_EXHAUSTED");
ABSL_FLAG(std::string, summary_json, "", "write a JSON summary here on exit");
ABSL_FLAG(bool, quiet, false, "no line per changed batch plan, no progress lines");
ABSL_FLAG(double, progress_every_s, 10, "seconds between progress lines (epoch, samples/s, loss, accuracy); 0 = none");
ABSL_FLAG(bool, exit_when_done, false,
          "exit 0 once the job is finished (every worker left, one at least having completed its epochs), after "
          "the checkpoint, export and summary: for Kubernetes Jobs, Slurm and scripts");
ABSL_FLAG(bool, reset_when_done, false,
          "once the job is finished, the next worker to join starts a new job on this daemon (a new model allowed) "
          "instead of being refused");
ABSL_FLAG(double, shutdown_grace_s, 10,
          "on SIGTERM/SIGINT: seconds to keep answering so every worker is told to stop (and exits 0)");
ABSL_FLAG(int, metrics_port, 9400, "Prometheus /metrics port (0 = off)");
ABSL_FLAG(std::string, metrics_bind, "0.0.0.0", "address the /metrics endpoint listens on");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain (with --tls_key: TLS on)");
ABSL_FLAG(std::string, tls_key, "", "PEM server private key");
ABSL_FLAG(std::string, tls_client_ca, "", "PEM CA for client certificates (mutual TLS: workers must present one)");
ABSL_FLAG(std::string, peer_tls_ca, "",
          "sharded jobs with TLS: PEM CA that signed the other servers' certificates (the coordinator's, the "
          "shards'); the calls between servers use TLS and present --tls_cert/--tls_key (for --tls_client_ca)");
ABSL_FLAG(std::string, auth_token_file, "", "file holding a shared bearer token every call must carry");
ABSL_FLAG(std::string, peer_token_file, "",
          "sharded jobs: file holding the job's peer secret, the same on every server of the job and not the "
          "workers' token: only a caller that carries it registers as a shard (and so receives sessions, restores "
          "and checkpoint commands). Required unless every server listens on loopback");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "keep checkpoints here and resume from the newest valid one at start (empty = no checkpoints)");
ABSL_FLAG(double, checkpoint_every_s, 60, "seconds between checkpoints (one more is written at shutdown)");
ABSL_FLAG(int, checkpoint_keep, 3, "checkpoints kept (older ones are deleted)");
ABSL_FLAG(bool, fresh, false,
          "start a new model although --checkpoint_dir holds checkpoints (they are moved aside, not deleted)");
ABSL_FLAG(std::string, export, "",
          "at shutdown, write the trained weights alone to this safetensors file (for Python, --init_from)");

namespace omnilearn {
namespace server {
namespace {

// Says why the server cannot go on; returns the exit status `code`.
int Fail(const absl::Status& s, int code) {
  std::fprintf(stderr, "omnilearn_server: %s\n", std::string(s.message()).c_str());
  return code;
}

// Once, after parsing: the deprecated names set the new flags when given.
void ApplyRenamedFlags() {
  absl::SetFlag(&FLAGS_round_timeout_s, RenamedFlag("round_timeout", absl::GetFlag(FLAGS_round_timeout),
                                                    "round_timeout_s", absl::GetFlag(FLAGS_round_timeout_s)));
  absl::SetFlag(&FLAGS_lease_s,
                RenamedFlag("lease", absl::GetFlag(FLAGS_lease), "lease_s", absl::GetFlag(FLAGS_lease_s)));
}

absl::Status CheckFlags() {
  auto d = [](auto v) { return static_cast<double>(v); };
  return CheckFlagRanges({
      {"port", d(absl::GetFlag(FLAGS_port)), 0, 65535},
      {"shards", d(absl::GetFlag(FLAGS_shards)), 1, ShardMap::kMaxShards},
      {"partition_mb", absl::GetFlag(FLAGS_partition_mb), 1.0 / (1 << 20), 1 << 20},
      {"staleness_bound", d(absl::GetFlag(FLAGS_staleness_bound)), 0, 1e6},
      {"num_workers", d(absl::GetFlag(FLAGS_num_workers)), 1, 100000},
      {"start_timeout_s", d(absl::GetFlag(FLAGS_start_timeout_s)), 1, 7 * 86400},
      {"lr", absl::GetFlag(FLAGS_lr), 1e-12, 100},
      {"momentum", absl::GetFlag(FLAGS_momentum), 0, 0.999999},
      {"weight_decay", absl::GetFlag(FLAGS_weight_decay), 0, 10},
      {"beta1", absl::GetFlag(FLAGS_beta1), 0, 0.999999999},
      {"beta2", absl::GetFlag(FLAGS_beta2), 0, 0.999999999},
      {"eps", absl::GetFlag(FLAGS_eps), 1e-15, 1},
      {"warmup_steps", d(absl::GetFlag(FLAGS_warmup_steps)), 0, 1e12},
      {"lr_decay_steps", d(absl::GetFlag(FLAGS_lr_decay_steps)), 0, 1e12},
      {"lr_decay_epochs", absl::GetFlag(FLAGS_lr_decay_epochs), 0, 1e6},
      {"lr_decay", absl::GetFlag(FLAGS_lr_decay), 1e-9, 1},
      {"cosine_steps", d(absl::GetFlag(FLAGS_cosine_steps)), 0, 1e12},
      {"lr_min", absl::GetFlag(FLAGS_lr_min), 0, absl::GetFlag(FLAGS_lr)},
      {"clip_grad_norm", absl::GetFlag(FLAGS_clip_grad_norm), 0, 1e9},
      {"round_timeout_s", absl::GetFlag(FLAGS_round_timeout_s), 0.001, 86400},
      {"lease_s", absl::GetFlag(FLAGS_lease_s), 0.01, 86400},
      {"stream_idle_timeout_s", absl::GetFlag(FLAGS_stream_idle_timeout_s), 0.1, 86400},
      {"max_rpc_threads", static_cast<double>(absl::GetFlag(FLAGS_max_rpc_threads)), 16, 65536},
      {"metrics_port", d(absl::GetFlag(FLAGS_metrics_port)), 0, 65535},
      {"checkpoint_every_s", absl::GetFlag(FLAGS_checkpoint_every_s), 0.01, 30 * 86400},
      {"checkpoint_keep", d(absl::GetFlag(FLAGS_checkpoint_keep)), 1, 1000},
      {"progress_every_s", absl::GetFlag(FLAGS_progress_every_s), 0, 86400},
      {"shutdown_grace_s", absl::GetFlag(FLAGS_shutdown_grace_s), 0, 3600},
      {"max_model_bytes", d(absl::GetFlag(FLAGS_max_model_bytes)), 4, 1e15},
  });
}

// Prints what a checkpoint attempt did; false on an error (the server goes on: the
// previous checkpoints are intact).
bool ReportCheckpoint(const absl::StatusOr<std::string>& written) {
  if (!written.ok()) {
    std::fprintf(stderr, "omnilearn_server: checkpoint failed: %s\n", std::string(written.status().message()).c_str());
    return false;
  }
  if (!written->empty()) {
    std::printf("omnilearn_server: checkpoint %s\n", written->c_str());
    std::fflush(stdout);
  }
  return true;
}

// A checkpoint is resumed by a server of the same kind: one server's by one server, a
// sharded job's coordinator's by a sharded coordinator.
absl::Status CheckSameKind(const CheckpointState& state) {
  const bool sharded = absl::GetFlag(FLAGS_shards) > 1;
  if (sharded && !state.sharded.has_value()) {
    return absl::FailedPreconditionError(
        "it is one server's checkpoint (or a shard's), and this server is a sharded job's coordinator: start it "
        "without --shards, or start over with --fresh");
  }
  if (!sharded && state.sharded.has_value()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "it is the checkpoint of a sharded job's coordinator: start it with --shards=%d --partition_mb=%g (and the "
        "shard servers on their checkpoint directories), or start over with --fresh",
        state.sharded->shards, static_cast<double>(state.sharded->partition_bytes) / (1 << 20)));
  }
  return absl::OkStatus();
}

// Resumes from the newest valid checkpoint in `dir`, if there is one. A sharded
// coordinator (`shards`) then waits for its shards to go back with it to the newest
// checkpoint every server holds (docs/SHARDING.md).
absl::Status ResumeFrom(const CheckpointDir& dir, ParameterServerCore* core, CoordinatorShards* shards) {
  auto loaded = dir.LoadNewest(
      [](const std::string& warning) { std::fprintf(stderr, "omnilearn_server: WARNING: %s\n", warning.c_str()); });
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) {
    if (dir.List().empty()) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat("no checkpoint in ", dir.dir(), " could be read: fix or move them, or start over with --fresh"));
  }
  const auto& [file, state] = **loaded;
  absl::Status s = CheckSameKind(state);
  if (s.ok()) s = core->Restore(state);
  if (s.ok() && shards != nullptr) s = shards->Resume(*state.sharded, state.layout);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("cannot resume from ", file, ": ", s.message()));
  std::printf("omnilearn_server: resumed from %s: version %lu, %lu samples, %zu workers remembered, %.0f s old\n",
              file.c_str(), state.version, state.global_samples, state.controller.size(),
              absl::ToDoubleSeconds(absl::Now() - state.created));
  return absl::OkStatus();
}

// --checkpoint_dir: resumes from the newest valid checkpoint (or, with --fresh, moves
// the old ones aside) and sets up the timer; a sharded coordinator's (`shards`) recovery
// goes back to these checkpoints. Errors stop the server: a checkpoint that does not fit
// the flags is never silently replaced by a fresh start.
absl::Status SetUpCheckpoints(ParameterServerCore* core, CoordinatorShards* shards,
                              std::unique_ptr<Checkpointer>* checkpointer) {
  const std::string path = absl::GetFlag(FLAGS_checkpoint_dir);
  if (path.empty()) {
    if (absl::GetFlag(FLAGS_fresh)) return absl::InvalidArgumentError("--fresh needs --checkpoint_dir");
    return absl::OkStatus();
  }
  CheckpointDir dir(path, absl::GetFlag(FLAGS_checkpoint_keep));
  if (absl::Status s = dir.Prepare(); !s.ok()) return s;
  if (absl::GetFlag(FLAGS_fresh)) {
    absl::StatusOr<std::string> aside = dir.MoveAside(absl::Now());
    if (!aside.ok()) return aside.status();
    if (!aside->empty()) std::printf("omnilearn_server: --fresh: moved the old checkpoints to %s\n", aside->c_str());
  }
  std::function<void(CheckpointState*)> complete;
  if (shards != nullptr) complete = [shards](CheckpointState* s) { s->sharded = shards->sharded_job(); };
  *checkpointer = std::make_unique<Checkpointer>(core, dir, absl::Seconds(absl::GetFlag(FLAGS_checkpoint_every_s)),
                                                 std::move(complete));
  if (shards != nullptr) {
    Checkpointer* c = checkpointer->get();
    shards->SetRecover([c](const std::vector<std::vector<uint64_t>>& held) { return c->GoBack(held); });
  }
  return absl::GetFlag(FLAGS_fresh) ? absl::OkStatus() : ResumeFrom(dir, core, shards);
}

absl::StatusOr<bool> OnOff(const std::string& flag, const std::string& value) {
  if (value == "on") return true;
  if (value == "off") return false;
  return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", value, ": want on or off"));
}

absl::StatusOr<v1::WireDtype> WireDtypeFromFlag() {
  const std::string wire = absl::GetFlag(FLAGS_wire_dtype);
  std::optional<v1::WireDtype> dtype = ParseEnumName<v1::WireDtype>(wire);
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("--wire_dtype=", wire, ": want ",
                     absl::StrJoin(ShortEnumNames(*v1::WireDtype_descriptor(), /*skip_zero=*/false), " or ")));
  }
  return *dtype;
}

// The flags that name a choice (mode, controller, optimizer...), parsed into `o`.
absl::Status ParseChoices(ServerOptions* o) {
  auto mode = ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return mode.status();
  auto controller = controller::ControllerFromFlags();
  if (!controller.ok()) return controller.status();
  auto optimizer = ParseOptimizer(absl::GetFlag(FLAGS_optimizer));
  if (!optimizer.ok()) return optimizer.status();
  const bool step_by_default = absl::GetFlag(FLAGS_lr_decay_steps) > 0 || absl::GetFlag(FLAGS_lr_decay_epochs) > 0;
  auto schedule = ParseLrSchedule(absl::GetFlag(FLAGS_lr_schedule).empty() ? (step_by_default ? "step" : "constant")
                                                                           : absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return schedule.status();
  auto lr_scaling = OnOff("lr_scaling", absl::GetFlag(FLAGS_lr_scaling));
  if (!lr_scaling.ok()) return lr_scaling.status();
  auto damping = OnOff("staleness_damping", absl::GetFlag(FLAGS_staleness_damping));
  if (!damping.ok()) return damping.status();
  auto adam_sqrt = OnOff("adam_sqrt_scaling", absl::GetFlag(FLAGS_adam_sqrt_scaling));
  if (!adam_sqrt.ok()) return adam_sqrt.status();
  const std::string aggregation = absl::GetFlag(FLAGS_aggregation);
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
  o->aggregation = aggregation == "mean" ? ServerOptions::Aggregation::kMean : ServerOptions::Aggregation::kWeighted;
  return absl::OkStatus();
}

// The server's options from the flags; `wire_dtype` is the service's.
absl::StatusOr<ServerOptions> OptionsFromFlags(v1::WireDtype* wire_dtype) {
  if (absl::Status s = CheckFlags(); !s.ok()) return s;
  ServerOptions o;
  if (absl::Status s = ParseChoices(&o); !s.ok()) return s;
  absl::StatusOr<v1::WireDtype> wire = WireDtypeFromFlag();
  if (!wire.ok()) return wire.status();
  *wire_dtype = *wire;
  o.staleness_bound = absl::GetFlag(FLAGS_staleness_bound);
  o.num_workers = absl::GetFlag(FLAGS_num_workers);
  o.start_timeout = absl::Seconds(absl::GetFlag(FLAGS_start_timeout_s));
  o.round_timeout = absl::Seconds(absl::GetFlag(FLAGS_round_timeout_s));
  o.lease = absl::Seconds(absl::GetFlag(FLAGS_lease_s));
  o.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  o.optimizer.momentum = absl::GetFlag(FLAGS_momentum);
  o.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.optimizer.beta1 = absl::GetFlag(FLAGS_beta1);
  o.optimizer.beta2 = absl::GetFlag(FLAGS_beta2);
  o.optimizer.eps = absl::GetFlag(FLAGS_eps);
  o.optimizer.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.optimizer.lr_decay_steps = absl::GetFlag(FLAGS_lr_decay_steps);
  o.optimizer.lr_decay_epochs = absl::GetFlag(FLAGS_lr_decay_epochs);
  o.optimizer.lr_decay = absl::GetFlag(FLAGS_lr_decay);
  o.optimizer.cosine_steps = absl::GetFlag(FLAGS_cosine_steps);
  o.optimizer.lr_min = absl::GetFlag(FLAGS_lr_min);
  o.optimizer.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  o.data_seed = absl::GetFlag(FLAGS_data_seed);
  o.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  o.reset_when_done = absl::GetFlag(FLAGS_reset_when_done);
  o.log = [](const std::string& line) {
    std::printf("omnilearn_server: %s\n", line.c_str());
    std::fflush(stdout);
  };
  return o;
}

// --auth_token_file's token ("" without one); warns when the port is open to anyone.
absl::StatusOr<std::string> TokenFromFlags() {
  std::string token;
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(absl::GetFlag(FLAGS_auth_token_file));
    if (!t.ok()) return t.status();
    token = *t;
  }
  if (!IsLoopbackAddress(absl::GetFlag(FLAGS_bind)) && absl::GetFlag(FLAGS_tls_cert).empty() && token.empty()) {
    std::fprintf(stderr,
                 "omnilearn_server: WARNING: listening on %s with neither TLS nor a token: anyone who can reach "
                 "this port can read and change the model (see --tls_cert, --auth_token_file)\n",
                 absl::GetFlag(FLAGS_bind).c_str());
  }
  return token;
}

void PrintListening(const ServerOptions& o, int port, v1::WireDtype wire_dtype, bool token,
                    const metrics::MetricsExposer* exposer) {
  const bool tls = !absl::GetFlag(FLAGS_tls_cert).empty();
  std::printf(
      "omnilearn_server listening on %s:%d mode=%s controller=%s balance=%s wire=%s global_batch=%ld "
      "workers=%d tls=%s token=%s metrics=%s\n",
      absl::GetFlag(FLAGS_bind).c_str(), port, ModeName(o.mode), controller::PolicyName(o.controller.policy).c_str(),
      controller::BalanceName(o.controller.balance).c_str(), WireDtypeName(wire_dtype), o.controller.global_batch,
      o.num_workers, tls ? (absl::GetFlag(FLAGS_tls_client_ca).empty() ? "on" : "mutual") : "off", token ? "on" : "off",
      exposer ? absl::StrCat(absl::GetFlag(FLAGS_metrics_bind), ":", exposer->port(), "/metrics").c_str() : "off");
  std::fflush(stdout);
}

// Until `stopping`: timed checkpoints, a line when the batch plan changes, and progress
// lines every --progress_every_s.
void Monitor(ParameterServerCore* core, Checkpointer* checkpointer, const std::atomic<bool>* stopping) {
  uint64_t shown_changes = 0;
  const absl::Duration progress_every = absl::Seconds(absl::GetFlag(FLAGS_progress_every_s));
  absl::Time last_progress = absl::Now();
  // From what a resumed job had trained already: a rate counts this run's samples only.
  uint64_t last_samples = core->Snapshot().global_samples, last_job = 1;
  while (!stopping->load()) {
    absl::SleepFor(absl::Milliseconds(200));
    if (checkpointer != nullptr) ReportCheckpoint(checkpointer->MaybeCheckpoint());
    const ServerSnapshot s = core->Snapshot();
    if (s.job != last_job) last_job = s.job, last_samples = 0, shown_changes = 0;
    if (absl::GetFlag(FLAGS_quiet)) continue;
    if (s.plan_changes != shown_changes) {  // a line only when the batch plan changed
      shown_changes = s.plan_changes;
      std::printf("%s\n", AdjustmentLine(s).c_str());
      std::fflush(stdout);
    }
    const absl::Time now = absl::Now();
    if (progress_every > absl::ZeroDuration() && now - last_progress >= progress_every && s.version > 0 &&
        !s.job_finished) {
      std::printf("%s\n", ProgressLine(s, last_samples, now - last_progress).c_str());
      std::fflush(stdout);
      last_progress = now;
      last_samples = s.global_samples;
    }
  }
}

// Until a signal, or (--exit_when_done) the end of the job.
void AwaitSignalOrEnd(const sigset_t& signals, ParameterServerCore* core) {
  const timespec tick = {0, 200 * 1000 * 1000};
  while (true) {
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig > 0) {
      std::printf("omnilearn_server: signal %d: shutting down; telling the workers to stop\n", sig);
      break;
    }
    if (absl::GetFlag(FLAGS_exit_when_done) && core->Snapshot().job_finished) {
      std::printf("omnilearn_server: the job is finished: exiting (--exit_when_done)\n");
      break;
    }
  }
  std::fflush(stdout);
}

// How this server calls the job's other servers: credentials, the workers' token (the
// export pulls slices as a session of its own) and the job's peer secret (the Shard call).
struct PeerAccess {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string token;
  std::string peer_token;
};

// A sharded server's --peer_token_file secret ("" without one). Without one every server
// of the job must listen on loopback; it must not be the workers' token (a worker would
// then be a server of the job).
absl::StatusOr<std::string> PeerTokenFromFlags(const std::string& worker_token) {
  std::string peer;
  if (!absl::GetFlag(FLAGS_peer_token_file).empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(absl::GetFlag(FLAGS_peer_token_file));
    if (!t.ok()) return t.status();
    peer = *t;
  }
  if (peer.empty() && !IsLoopbackAddress(absl::GetFlag(FLAGS_bind))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a sharded job's servers must prove to each other that they are servers of the job, and this one listens "
        "on ",
        absl::GetFlag(FLAGS_bind),
        ": give every server of the job --peer_token_file (one secret, not the "
        "workers' token), or listen on loopback only (--bind=127.0.0.1)"));
  }
  if (!peer.empty() && peer == worker_token) {
    return absl::InvalidArgumentError(
        "--peer_token_file holds the workers' token: the servers' secret must be another, or every worker could "
        "register as a shard");
  }
  return peer;
}

// The credentials of this server's calls to the job's other servers (a shard's link to its
// coordinator, the coordinator's export pulls): TLS with --peer_tls_ca, presenting this
// server's own certificate, since a server that listens with TLS takes no plain text.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentials() {
  const std::string ca = absl::GetFlag(FLAGS_peer_tls_ca);
  if (ca.empty()) {
    if (!absl::GetFlag(FLAGS_tls_cert).empty()) {
      return absl::InvalidArgumentError(
          "a sharded job with --tls_cert needs --peer_tls_ca: its servers call each other over TLS too");
    }
    return grpc::InsecureChannelCredentials();
  }
  return MakeChannelCredentials({ca, absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key)});
}

// A coordinator's access to its job's other servers (`sharded`), or a single server's
// (the workers' token alone).
absl::StatusOr<PeerAccess> PeerAccessFromFlags(bool sharded, const std::string& token) {
  PeerAccess peers{nullptr, token, ""};
  if (!sharded) return peers;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> c = PeerCredentials();
  if (!c.ok()) return c.status();
  peers.credentials = *c;
  absl::StatusOr<std::string> peer_token = PeerTokenFromFlags(token);
  if (!peer_token.ok()) return peer_token.status();
  peers.peer_token = *peer_token;
  return peers;
}

// The whole model of a sharded job: slice 0 from the coordinator's capture, every other
// slice pulled from its shard at the same version (under a session of the coordinator's).
absl::StatusOr<std::vector<float>> AssembleModel(CoordinatorShards* shards, const CheckpointState& slice0,
                                                 const PeerAccess& peers) {
  const std::optional<ShardMap> map = shards->map();
  const std::optional<ModelLayout> layout = shards->job_layout();
  if (!map.has_value() || !layout.has_value()) return absl::FailedPreconditionError("the job has no model yet");
  std::vector<float> whole(layout->total_elements());
  map->Scatter(0, *slice0.weights, absl::MakeSpan(whole));
  constexpr WorkerId kExportSession = ~WorkerId{0};
  const std::string secret = NewSessionSecret();
  shards->Hooks().session_opened(kExportSession, secret);
  for (const CoordinatorShards::ShardInfo& shard : shards->Shards()) {
    absl::StatusOr<std::vector<float>> slice;
    for (int attempt = 0; attempt < 50; ++attempt) {  // until the shard has the session (its stream's order)
      slice = PullSlice(shard.address, peers.credentials, peers.token, kExportSession, secret,
                        map->slice_layout(shard.index), slice0.version, absl::Seconds(60));
      if (!absl::IsNotFound(slice.status())) break;
      absl::SleepFor(absl::Milliseconds(200));
    }
    if (!slice.ok()) return slice.status();
    map->Scatter(shard.index, *slice, absl::MakeSpan(whole));
  }
  shards->Hooks().session_closed(kExportSession);
  return whole;
}

// --export: the trained model's weights, the whole of it in a sharded job.
absl::Status Export(ParameterServerCore* core, CoordinatorShards* shards, const PeerAccess& peers) {
  absl::StatusOr<CheckpointState> state = core->Capture();
  if (!state.ok()) return state.status();
  absl::Status s;
  if (shards == nullptr) {
    s = ExportModel(absl::GetFlag(FLAGS_export), state->layout, *state->weights, state->version);
  } else {
    absl::StatusOr<std::vector<float>> whole = AssembleModel(shards, *state, peers);
    s = whole.ok() ? ExportModel(absl::GetFlag(FLAGS_export), *shards->job_layout(), *whole, state->version)
                   : whole.status();
  }
  if (s.ok()) {
    std::printf("omnilearn_server: exported the model (version %lu) to %s\n", state->version,
                absl::GetFlag(FLAGS_export).c_str());
  }
  return s;
}

// The last checkpoint, the export and the summary; the exit status (1 when one failed).
// A sharded job's shards are still serving: the last checkpoint reaches them, the export
// pulls their slices.
int WriteResults(ParameterServerCore* core, Checkpointer* checkpointer, CoordinatorShards* shards,
                 const PeerAccess& peers, absl::Time start) {
  int rc = 0;
  if (checkpointer != nullptr && !ReportCheckpoint(checkpointer->CheckpointNow())) rc = 1;
  if (!absl::GetFlag(FLAGS_export).empty()) {
    if (absl::Status s = Export(core, shards, peers); !s.ok()) {
      std::fprintf(stderr, "omnilearn_server: export to %s failed: %s\n", absl::GetFlag(FLAGS_export).c_str(),
                   std::string(s.message()).c_str());
      rc = 1;
    }
  }
  const ServerSnapshot s = core->Snapshot();
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) {
    const std::string json = SummaryJson(s, absl::ToDoubleSeconds(absl::Now() - start));
    absl::Status written = WriteFileAtomically(path, [&](const ByteSink& write) {
      return write(json.data(), json.size()) ? absl::OkStatus() : absl::DataLossError("short write");
    });
    if (!written.ok()) {
      std::fprintf(stderr, "omnilearn_server: cannot write --summary_json=%s: %s\n", path.c_str(),
                   std::string(written.message()).c_str());
      return 1;
    }
  }
  std::printf("final: %s\n", AdjustmentLine(s).c_str());
  return rc;
}

int64_t PartitionBytes() { return static_cast<int64_t>(absl::GetFlag(FLAGS_partition_mb) * (1 << 20)); }

std::string AdvertisedAddress(int port) {
  if (!absl::GetFlag(FLAGS_advertise).empty()) return absl::GetFlag(FLAGS_advertise);
  std::string host = absl::GetFlag(FLAGS_bind);
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    char name[256] = {0};
    host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
  }
  return absl::StrCat(host, ":", port);
}

// What a sharded job cannot do yet, refused at start rather than done wrong.
absl::Status CheckShardable(const ServerOptions& o) {
  if (absl::GetFlag(FLAGS_shards) == 1) return absl::OkStatus();
  if (o.optimizer.clip_grad_norm > 0) {
    return absl::InvalidArgumentError("--clip_grad_norm needs the whole gradient's norm: not with --shards > 1 yet");
  }
  if (o.reset_when_done) {
    return absl::InvalidArgumentError("--reset_when_done is not built for sharded jobs yet (docs/SHARDING.md)");
  }
  if (!absl::GetFlag(FLAGS_checkpoint_dir).empty() && absl::GetFlag(FLAGS_checkpoint_keep) < 2) {
    return absl::InvalidArgumentError(
        "--shards > 1 needs --checkpoint_keep >= 2: the newest checkpoint may not be every shard's yet");
  }
  return absl::OkStatus();
}

// The gRPC server of `service` on `address` (its port 0: any; *bound_port says which, 0
// when it could not listen).
std::unique_ptr<grpc::Server> Listen(const std::string& address,
                                     const std::shared_ptr<grpc::ServerCredentials>& credentials,
                                     grpc::Service* service, int* bound_port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, credentials, bound_port);
  ConfigureServerBuilder(builder, absl::GetFlag(FLAGS_max_rpc_threads));
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

// The process figures and, with --metrics_port, the /metrics endpoint (null without it).
absl::StatusOr<std::unique_ptr<metrics::MetricsExposer>> ExposeMetrics(metrics::Registry& registry) {
  metrics::AddProcessMetrics(registry);
  if (absl::GetFlag(FLAGS_metrics_port) == 0) return std::unique_ptr<metrics::MetricsExposer>();
  return metrics::MetricsExposer::Start(absl::GetFlag(FLAGS_metrics_bind), absl::GetFlag(FLAGS_metrics_port),
                                        &registry);
}

ServiceLimits LimitsFromFlags() {
  ServiceLimits limits;
  limits.stream_idle_timeout = absl::Seconds(absl::GetFlag(FLAGS_stream_idle_timeout_s));
  return limits;
}

// `service` on --bind:--port with the TLS flags' credentials; *bound_port says which port.
// InvalidArgument for the TLS flags, Unavailable when it cannot listen.
absl::StatusOr<std::unique_ptr<grpc::Server>> ListenOnFlags(grpc::Service* service, int* bound_port) {
  auto credentials = MakeServerCredentials(
      {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_client_ca)});
  if (!credentials.ok()) return credentials.status();
  const std::string address = absl::StrCat(absl::GetFlag(FLAGS_bind), ":", absl::GetFlag(FLAGS_port));
  *bound_port = 0;
  std::unique_ptr<grpc::Server> server = Listen(address, *credentials, service, bound_port);
  if (!server || *bound_port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  return server;
}

// Exits 1 when the server could not listen, 2 for flags that cannot work.
int FailToListen(const absl::Status& s) { return Fail(s, absl::IsUnavailable(s) ? 1 : 2); }

// A shard's link to its coordinator, from the flags.
ShardLinkOptions LinkOptionsFromFlags(int bound_port, const std::string& peer_token,
                                      std::shared_ptr<grpc::ChannelCredentials> credentials,
                                      std::function<void(const std::string&)> log) {
  ShardLinkOptions lo;
  lo.coordinator = absl::GetFlag(FLAGS_coordinator);
  lo.address = AdvertisedAddress(bound_port);
  lo.shards = absl::GetFlag(FLAGS_shards);
  lo.partition_bytes = PartitionBytes();
  lo.index = absl::GetFlag(FLAGS_shard_index);
  lo.peer_token = peer_token;
  lo.credentials = std::move(credentials);
  lo.start_timeout = absl::Seconds(absl::GetFlag(FLAGS_start_timeout_s));
  lo.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  lo.checkpoint_keep = absl::GetFlag(FLAGS_checkpoint_keep);
  lo.log = std::move(log);
  return lo;
}

// Runs the link until it ends or a signal comes; what it ended with (OK after a signal).
absl::Status RunLinkUntilSignal(ShardLink& link, const sigset_t& signals) {
  absl::Status ended;
  std::atomic<bool> link_done{false};
  std::thread runner([&] {
    ended = link.Run();
    link_done.store(true);
  });
  const timespec tick = {0, 200 * 1000 * 1000};
  while (!link_done.load()) {
    if (sigtimedwait(&signals, nullptr, &tick) > 0) break;
  }
  link.Stop();
  runner.join();
  return ended;
}

// A shard server: one slice of a coordinator's job, until a signal or the link's end.
int RunShard(const sigset_t& signals) {
  if (absl::Status s = CheckFlags(); !s.ok()) return Fail(s, 2);
  const auto log = [](const std::string& line) {
    std::printf("omnilearn_server (shard): %s\n", line.c_str());
    std::fflush(stdout);
  };
  ShardCore shard({Clock::Real(), log});
  absl::StatusOr<std::string> token = TokenFromFlags();
  if (!token.ok()) return Fail(token.status(), 2);
  absl::StatusOr<std::string> peer_token = PeerTokenFromFlags(*token);
  if (!peer_token.ok()) return Fail(peer_token.status(), 2);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> peer_credentials = PeerCredentials();
  if (!peer_credentials.ok()) return Fail(peer_credentials.status(), 2);
  // A session's dtype is the coordinator's choice at Join: a shard reads and writes either.
  ParameterServerService service(&shard, absl::Minutes(10), *token, LimitsFromFlags(), v1::WIRE_DTYPE_BF16);
  int bound_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = ListenOnFlags(&service, &bound_port);
  if (!server.ok()) return FailToListen(server.status());
  auto exposer = ExposeMetrics(shard.registry());
  if (!exposer.ok()) return Fail(exposer.status(), 1);
  const ShardLinkOptions lo = LinkOptionsFromFlags(bound_port, *peer_token, *peer_credentials, log);
  std::printf(
      "omnilearn_server (shard) listening on %s:%d as %s, coordinator %s, metrics %s\n",
      absl::GetFlag(FLAGS_bind).c_str(), absl::GetFlag(FLAGS_port), lo.address.c_str(), lo.coordinator.c_str(),
      *exposer ? absl::StrCat(absl::GetFlag(FLAGS_metrics_bind), ":", (*exposer)->port(), "/metrics").c_str() : "off");
  std::fflush(stdout);
  ShardLink link(lo, &shard);
  if (absl::Status s = link.Prepare(); !s.ok()) return Fail(s, 2);
  if (lo.checkpoint_dir.empty()) log("no --checkpoint_dir: a restart of this shard cannot resume the job");
  const absl::Status ended = RunLinkUntilSignal(link, signals);
  shard.Shutdown();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (!ended.ok()) {
    std::fprintf(stderr, "omnilearn_server (shard): %s\n", std::string(ended.message()).c_str());
    return 1;
  }
  std::printf("omnilearn_server (shard): stopped; slice at version %lu\n", shard.version());
  return 0;
}

// The core answers every later call "stop"; it keeps answering until each live worker
// heard it, for up to --shutdown_grace_s.
void TellWorkersToStop(ParameterServerCore* core) {
  core->Shutdown();
  const absl::Duration grace = absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s));
  if (!core->AwaitWorkersStopped(core->clock().Now() + grace)) {
    std::printf("omnilearn_server: not every worker was told to stop within %.0f s (--shutdown_grace_s)\n",
                absl::ToDoubleSeconds(grace));
  }
}

// A sharded job's coordinator side (--shards > 1): what every shard must share with it.
std::unique_ptr<CoordinatorShards> MakeCoordinatorShards(const ServerOptions& o) {
  CoordinatorShardsOptions so;
  so.shards = absl::GetFlag(FLAGS_shards);
  so.partition_bytes = PartitionBytes();
  so.address = AdvertisedAddress(absl::GetFlag(FLAGS_port));
  so.optimizer = OptimizerToProto(o.optimizer, o.round_timeout);
  so.log = o.log;
  so.sync = o.mode == Mode::kSync;
  return std::make_unique<CoordinatorShards>(so);
}

int Run() {
  ApplyRenamedFlags();
  // SIGTERM / SIGINT are taken by sigwait below, so shutdown runs outside signal
  // context. Blocked first, before any thread exists (civetweb's, gRPC's): threads
  // inherit the mask, and one that left them unblocked would let a SIGTERM kill the
  // process before the summary is written.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (!absl::GetFlag(FLAGS_coordinator).empty()) return RunShard(signals);
  v1::WireDtype wire_dtype = v1::WIRE_DTYPE_F32;
  absl::StatusOr<ServerOptions> o = OptionsFromFlags(&wire_dtype);
  if (!o.ok()) return Fail(o.status(), 2);
  if (absl::Status s = CheckShardable(*o); !s.ok()) return Fail(s, 2);
  std::unique_ptr<CoordinatorShards> shards;
  if (absl::GetFlag(FLAGS_shards) > 1) {
    shards = MakeCoordinatorShards(*o);
    o->replication = shards->Hooks();
  }
  auto core = ParameterServerCore::Create(*o);
  if (!core.ok()) return Fail(core.status(), 2);
  absl::StatusOr<std::string> token = TokenFromFlags();
  if (!token.ok()) return Fail(token.status(), 2);
  absl::StatusOr<PeerAccess> peers = PeerAccessFromFlags(shards != nullptr, *token);
  if (!peers.ok()) return Fail(peers.status(), 2);
  if (shards != nullptr) shards->ExportMetrics((*core)->registry());
  auto exposer = ExposeMetrics((*core)->registry());
  if (!exposer.ok()) return Fail(exposer.status(), 1);

  ParameterServerService service(core->get(), absl::Minutes(10), *token, LimitsFromFlags(), wire_dtype);
  if (shards != nullptr) service.EnableShards(shards.get(), peers->peer_token);
  // Listening comes first: a second server on this port fails before it reads (or locks)
  // the checkpoints; calls wait (UNAVAILABLE, retried) until the resume is done.
  service.Hold();
  int bound_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = ListenOnFlags(&service, &bound_port);
  if (!server.ok()) return FailToListen(server.status());
  std::unique_ptr<Checkpointer> checkpointer;
  if (absl::Status s = SetUpCheckpoints(core->get(), shards.get(), &checkpointer); !s.ok()) return Fail(s, 2);
  service.Open();
  const absl::Time start = absl::Now();
  PrintListening(*o, bound_port, wire_dtype, !token->empty(), exposer->get());

  std::atomic<bool> stopping{false};
  std::thread monitor(Monitor, core->get(), checkpointer.get(), &stopping);
  AwaitSignalOrEnd(signals, core->get());
  TellWorkersToStop(core->get());
  stopping.store(true);
  monitor.join();
  const int rc = WriteResults(core->get(), checkpointer.get(), shards.get(), *peers, start);
  if (shards != nullptr) shards->Shutdown();  // their streams end once the last commands went
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return rc;
}

}  // namespace
}  // namespace server
}  // namespace omnilearn

int main(int argc, char** argv) {
  omnilearn::KeepLargeBuffersInHeap();
  omnilearn::ShowOwnFlagsInHelp({"server/main.cc", "controller/controller_flags.cc"});
  absl::SetProgramUsageMessage(
      "OmniLearn parameter server: holds the model, assigns every worker its samples and a mini-batch\n"
      "proportional to its speed, applies gradients (sync, async or ssp).\n"
      "  omnilearn_server --num_workers=N [--mode=sync|async|ssp] [--port=50051] [--checkpoint_dir=D] "
      "[--exit_when_done]");
  omnilearn::RefuseUnknownFlags(argc, argv);  // with the nearest flag as a suggestion
  absl::ParseCommandLine(argc, argv);
  return omnilearn::server::Run();
}
