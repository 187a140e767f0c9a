#include "server/daemon/flags.h"

#include <optional>

#include "absl/flags/flag.h"
#include "common/flag_checks.h"
#include "common/torch_optim_defaults.h"

ABSL_FLAG(int, port, 50051, "gRPC port");
ABSL_FLAG(std::string, bind, "0.0.0.0", "address to listen on");
ABSL_FLAG(int, shards, 1,
          "the job's parameters are cut over this many servers: this one (the coordinator, slice 0) and "
          "shards - 1 shard servers started with --coordinator (docs/SHARDING.md)");
ABSL_FLAG(double, partition_mb, 0,
          "sharded jobs: the model's partitions hold at most this many MB; 0: a size chosen from the model's "
          "size and the shard count (ShardMap::kAutoPartitionBytes in common/shard_map.h)");
ABSL_FLAG(bool, push_slices_in_order, false,
          "sharded jobs' coordinator: workers push the slices one after the other, slice 0 first, so each "
          "slice's model comes back while the next one's gradient still goes out; for slices that all live "
          "on one host whose link is several times a worker's (docs/SHARDING.md)");
ABSL_FLAG(bool, shard_steps_ahead, false,
          "sharded sync jobs' coordinator: each round's members and rate go to the shards when the round "
          "before closes, and a shard steps its slice as soon as their slices are in, without waiting for "
          "the coordinator's step; a member whose push reaches a shard and not the coordinator then sends "
          "the job back to its common checkpoint (docs/SHARDING.md)");
ABSL_FLAG(bool, replicate_slices, true,
          "sharded jobs' coordinator: each slice's checkpoint (--checkpoint_every_s, or in memory every "
          "--memory_checkpoint_every_s) also goes to the next server's memory, the coordinator's own to shard 1's, "
          "so that a server lost for good, disk and all, is replaced by any server started for its slice (a "
          "coordinator at the same address), which takes it from there (docs/reliability.md); false: a "
          "replacement must bring the slice's checkpoints");
ABSL_FLAG(std::string, coordinator, "",
          "HOST:PORT: run as a shard server of that coordinator's job (holding one slice of the model); "
          "etcd://HOST:PORT[,...][/KEY]: of the coordinator elected there (--election), looked up before each "
          "registration");
ABSL_FLAG(std::string, election, "",
          "etcd://HOST:PORT[,HOST:PORT...][/KEY]: this server is a candidate coordinator of a sharded job; it "
          "stands by until it holds KEY (default /omnilearn/coordinator) under an etcd lease, then coordinates, "
          "taking the job from slice 0's replicas when another held it; it exits 3 as soon as it cannot be sure "
          "it still holds the lease (docs/reliability.md)");
ABSL_FLAG(double, election_ttl_s, 6,
          "with --election: the lease's TTL; the coordinator renews it every TTL/4 and stops TTL/2 after the last "
          "renewal etcd answered, so a candidate takes over within about TTL of a loss");
ABSL_FLAG(int, shard_index, 0, "with --coordinator: the slice to hold (1..shards-1; 0 = any free one)");
ABSL_FLAG(std::string, advertise, "",
          "HOST:PORT workers reach this server at (sharded jobs; default: --bind:--port, or the host name when "
          "--bind is 0.0.0.0)");
ABSL_FLAG(std::string, mode, "sync", "sync | async | ssp (stale-synchronous, see --staleness_bound)");
ABSL_FLAG(int, staleness_bound, 4, "ssp: iterations a worker may run ahead of the slowest (0 = lockstep)");
ABSL_FLAG(int, local_steps, 1,
          "> 1: local steps (with sync, async or ssp): each worker splits the batch it is given into this many steps "
          "of its program's own optimizer and pushes the round's pseudo-gradient; the server's --optimizer is the "
          "outer one (DiLoCo's: --optimizer=sgd --lr=0.7 --momentum=0.9 --optimizer_options=nesterov=1) and "
          "--global_batch a round's samples");
ABSL_FLAG(int64_t, local_batch, 0,
          "> 0: local steps of this many samples each, instead of --local_steps: a worker's steps a round are its "
          "batch over this, so a faster worker (given more samples) takes more steps of the same size");
ABSL_FLAG(int, num_workers, 1, "workers the first round waits for");
ABSL_FLAG(int, start_timeout_s, 300, "start without the missing workers after this many seconds");
ABSL_FLAG(std::string, optimizer, "sgd",
          "torch.optim's: sgd | adam | adamw | adadelta | adagrad | adamax | nadam | radam | rmsprop | rprop | asgd | "
          "adafactor | muon; Keras's lion | lamb | ftrl (a worker that brings the job's model may bring its own "
          "instead)");
ABSL_FLAG(std::string, optimizer_options, "",
          "the optimizer's other options by torch.optim's names, name=value,... (flags as 0 or 1; pairs as two: "
          "beta1, beta2; etaminus, etaplus; step_size_min, step_size_max; eps1, eps2), e.g. nesterov=1 or "
          "rho=0.95,eps=1e-6; default: torch.optim's");
ABSL_FLAG(std::string, aggregation, "weighted",
          "sync: weighted (each push by its batch) | mean (every push once: an ablation)");
ABSL_FLAG(std::string, lr_scaling, "on", "async/ssp: on (a push's step scales with b/B) | off (1/n each: ablation)");
ABSL_FLAG(std::string, staleness_damping, "on",
          "async/ssp: on (stale pushes damped, momentum lowered; Adam's beta1 only without "
          "--adam_weight_prediction) | off (plain async: ablation)");
ABSL_FLAG(std::string, adam_sqrt_scaling, "on",
          "async/ssp with adam or adamw: on (a push of b samples is its b/B share of a global-batch step: "
          "the square-root rule; with the prediction 1.25x the sync --lr reaches the sync loss, README) | "
          "off (each push a full Adam step at lr * b/B: ablation)");
ABSL_FLAG(std::string, adam_weight_prediction, "on",
          "async/ssp with adam or adamw: on (workers compute on the weights stepped ahead by the steps the "
          "other live workers' pushes will take first: a stale gradient is computed near the weights it "
          "meets, and beta1 stays as configured) | off (on the weights as they are: ablation)");
ABSL_FLAG(double, lr, 0.05, "learning rate of one step on a global batch");
ABSL_FLAG(double, momentum, -1, "sgd, rmsprop, muon: momentum; default: torch.optim's for --optimizer (0; muon 0.95)");
ABSL_FLAG(double, weight_decay, -1,
          "weight decay (L2 on the gradient; adamw, and decoupled_weight_decay=1: decoupled); default: "
          "torch.optim's for --optimizer (0; adamw 0.01, muon 0.1)");
ABSL_FLAG(double, beta1, -1,
          "the Adam family (adam, adamw, adamax, nadam, radam), lion, lamb: first-moment decay; default: "
          "torch.optim's (0.9)");
ABSL_FLAG(double, beta2, -1,
          "the Adam family, lion, lamb: second-moment decay; default: torch.optim's (0.999; lion 0.99)");
ABSL_FLAG(double, eps, -1,
          "denominator epsilon; default: torch.optim's for --optimizer (1e-8; adadelta 1e-6, adagrad 1e-10, "
          "muon 1e-7)");
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
ABSL_FLAG(double, round_timeout_s, 30,
          "sync/ssp: seconds to wait for a late worker before dropping it (with local steps, a round is many "
          "steps: give it a round's time, and --lease_s more)");
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
ABSL_FLAG(double, memory_checkpoint_every_s, 2,
          "sharded jobs whose coordinator has no --checkpoint_dir: seconds between the checkpoints every server keeps "
          "in memory (the newest --checkpoint_keep), to which the job goes back after a partition");
ABSL_FLAG(bool, fresh, false,
          "start a new model although --checkpoint_dir holds checkpoints (they are moved aside, not deleted)");
ABSL_FLAG(std::string, export, "",
          "at shutdown, write the trained weights alone to this safetensors file (for Python, --init_from)");

namespace omnilearn {
namespace server {
namespace {

// The flags of the network, the job and the optimizer.
void ReadFirstHalf(DaemonFlags* out) {
  DaemonFlags& f = *out;
  f.port = absl::GetFlag(FLAGS_port);
  f.bind = absl::GetFlag(FLAGS_bind);
  f.shards = absl::GetFlag(FLAGS_shards);
  f.partition_mb = absl::GetFlag(FLAGS_partition_mb);
  f.push_slices_in_order = absl::GetFlag(FLAGS_push_slices_in_order);
  f.shard_steps_ahead = absl::GetFlag(FLAGS_shard_steps_ahead);
  f.replicate_slices = absl::GetFlag(FLAGS_replicate_slices);
  f.coordinator = absl::GetFlag(FLAGS_coordinator);
  f.election = absl::GetFlag(FLAGS_election);
  f.election_ttl_s = absl::GetFlag(FLAGS_election_ttl_s);
  f.shard_index = absl::GetFlag(FLAGS_shard_index);
  f.advertise = absl::GetFlag(FLAGS_advertise);
  f.mode = absl::GetFlag(FLAGS_mode);
  f.staleness_bound = absl::GetFlag(FLAGS_staleness_bound);
  f.local_steps = absl::GetFlag(FLAGS_local_steps);
  f.local_batch = absl::GetFlag(FLAGS_local_batch);
  f.num_workers = absl::GetFlag(FLAGS_num_workers);
  f.start_timeout_s = absl::GetFlag(FLAGS_start_timeout_s);
  f.optimizer = absl::GetFlag(FLAGS_optimizer);
  f.aggregation = absl::GetFlag(FLAGS_aggregation);
  f.lr_scaling = absl::GetFlag(FLAGS_lr_scaling);
  f.staleness_damping = absl::GetFlag(FLAGS_staleness_damping);
  f.adam_sqrt_scaling = absl::GetFlag(FLAGS_adam_sqrt_scaling);
  f.adam_weight_prediction = absl::GetFlag(FLAGS_adam_weight_prediction);
  f.lr = absl::GetFlag(FLAGS_lr);
  f.momentum = absl::GetFlag(FLAGS_momentum);
  f.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  f.beta1 = absl::GetFlag(FLAGS_beta1);
  f.beta2 = absl::GetFlag(FLAGS_beta2);
  f.eps = absl::GetFlag(FLAGS_eps);
  f.optimizer_options = absl::GetFlag(FLAGS_optimizer_options);
  f.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  f.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  f.lr_decay_steps = absl::GetFlag(FLAGS_lr_decay_steps);
  f.lr_decay_epochs = absl::GetFlag(FLAGS_lr_decay_epochs);
  f.lr_decay = absl::GetFlag(FLAGS_lr_decay);
  f.cosine_steps = absl::GetFlag(FLAGS_cosine_steps);
}

// The flags of the daemon: its limits, output, security and checkpoints.
void ReadSecondHalf(DaemonFlags* out) {
  DaemonFlags& f = *out;
  f.lr_min = absl::GetFlag(FLAGS_lr_min);
  f.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  f.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
  f.data_seed = absl::GetFlag(FLAGS_data_seed);
  f.wire_dtype = absl::GetFlag(FLAGS_wire_dtype);
  f.round_timeout_s = absl::GetFlag(FLAGS_round_timeout_s);
  f.lease_s = absl::GetFlag(FLAGS_lease_s);
  f.stream_idle_timeout_s = absl::GetFlag(FLAGS_stream_idle_timeout_s);
  f.max_rpc_threads = absl::GetFlag(FLAGS_max_rpc_threads);
  f.summary_json = absl::GetFlag(FLAGS_summary_json);
  f.quiet = absl::GetFlag(FLAGS_quiet);
  f.progress_every_s = absl::GetFlag(FLAGS_progress_every_s);
  f.exit_when_done = absl::GetFlag(FLAGS_exit_when_done);
  f.reset_when_done = absl::GetFlag(FLAGS_reset_when_done);
  f.shutdown_grace_s = absl::GetFlag(FLAGS_shutdown_grace_s);
  f.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  f.metrics_bind = absl::GetFlag(FLAGS_metrics_bind);
  f.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  f.tls_key = absl::GetFlag(FLAGS_tls_key);
  f.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  f.peer_tls_ca = absl::GetFlag(FLAGS_peer_tls_ca);
  f.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  f.peer_token_file = absl::GetFlag(FLAGS_peer_token_file);
  f.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  f.checkpoint_every_s = absl::GetFlag(FLAGS_checkpoint_every_s);
  f.checkpoint_keep = absl::GetFlag(FLAGS_checkpoint_keep);
  f.memory_checkpoint_every_s = absl::GetFlag(FLAGS_memory_checkpoint_every_s);
  f.fresh = absl::GetFlag(FLAGS_fresh);
  f.export_path = absl::GetFlag(FLAGS_export);
}

}  // namespace

DaemonFlags ReadFlags() {
  DaemonFlags f;
  ReadFirstHalf(&f);
  ReadSecondHalf(&f);
  // The names of earlier releases set the new flags when given.
  f.round_timeout_s =
      RenamedFlag("round_timeout", absl::GetFlag(FLAGS_round_timeout), "round_timeout_s", f.round_timeout_s);
  f.lease_s = RenamedFlag("lease", absl::GetFlag(FLAGS_lease), "lease_s", f.lease_s);
  return f;
}

}  // namespace server
}  // namespace omnilearn
