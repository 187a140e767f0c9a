// The parameter server's logic, free of gRPC, behind one mutex: this class is the
// locking facade that sequences the parts, each thread-compatible and tested on its own
// (the way leveldb's DBImpl calls helpers that require its mutex):
//   membership.h      the worker table, leases, names, the SSP bound
//   sync_round.h      a sync round's sum of b_k * g_k, members, clock and closing plan
//   async_rule.h      the asynchronous staleness rule (step, buffer blend, momentum)
//   epoch_sampler.h   the epochs' permutations and the samples handed out
//   parameter_store.h the weights, buffers and optimizer (shared_buffers.h: which
//                     replaced buffer a step writes into)
//   buffer_pool.h     model-sized buffers reused across pushes (its own lock)
//   job_life.h        the start barrier's clock, the job's finish, the job counter
//   join_check.h      what a join must bring (name, host, model size, data set, layout)
//   server_metrics.h  the Prometheus series and what a scrape reads into them
//   training_stats.h  rounds, samples, loss, accuracy, pushes by result, staleness
//   batch_controller  the batch plan (controller/)
// Here: the order of a join's and a push's steps, the waits (start barrier, sync round,
// SSP bound), which counters move when.
#ifndef OMNILEARN_SERVER_CONTROL_PARAMETER_SERVER_CORE_H_
#define OMNILEARN_SERVER_CONTROL_PARAMETER_SERVER_CORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/model_layout.h"
#include "common/training_mode.h"
#include "controller/batch_controller.h"
#include "server/checkpoint/checkpoint.h"
#include "server/control/async_rule.h"
#include "server/control/data_plane.h"
#include "server/control/epoch_sampler.h"
#include "server/control/job_life.h"
#include "server/control/join_check.h"
#include "server/control/membership.h"
#include "server/control/optimizer_mirror.h"
#include "server/control/push_check.h"
#include "server/control/server_metrics.h"
#include "server/control/sync_round.h"
#include "server/control/training_stats.h"
#include "server/data/buffer_pool.h"
#include "server/data/parameter_store.h"
#include "server/data/replicated_step.h"

namespace omnilearn {
namespace server {

using ::omnilearn::Mode;

// A sharded job's coordinator is told of what its shards must replay: sessions and steps.
// Called with the core's lock held: must not block or call back into the core. Null = not sharded.
struct Replication {
  std::function<void(WorkerId id, const std::string& secret)> session_opened;
  std::function<void(WorkerId id)> session_closed;
  // The job's model was taken from this joiner's initial parameters.
  std::function<void(const std::string& joiner)> model_adopted;
  // The job's optimizer, each time a model is adopted (a worker's optimizer or the flags') or
  // a checkpoint restored: the shards run the same (before model_adopted).
  std::function<void(const OptimizerOptions& optimizer)> optimizer;
  std::function<void(const ReplicatedStep& step)> step;
  // Sync, --shard_steps_ahead: the next round's members and rate, decided as the round before
  // closes (under the core's lock, after its step), when the round's step can be: not in a
  // clipped job (its norm is reduced at the step) nor under a schedule in epochs (the rate
  // may move with the round's samples).
  std::function<void(const RoundAhead& round)> round_ahead;
  // A job that clips (OptimizerOptions::clip_grad_norm): the whole update's squared norm
  // from slice 0's part, once the shards gave theirs; called under the core's lock, after
  // `step`, so it blocks the core until every slice's part came (bounded).
  NormReduction norm;
  // A checkpoint of the job is taken at this version: every slice takes its own.
  std::function<void(uint64_t version, uint64_t history)> checkpoint;
  // The job ended and job number `job` begins (--reset_when_done): the next model adopted
  // replaces every slice.
  std::function<void(uint64_t job)> job_reset;
};

struct ServerOptions {
  Mode mode = Mode::kSync;
  int num_workers = 1;                               // the first round waits for this many joins
  absl::Duration start_timeout = absl::Minutes(5);   // ...or starts with who is there after this
  absl::Duration round_timeout = absl::Seconds(30);  // sync/ssp: workers waited for longer are dropped
  int staleness_bound = 4;                           // ssp: iterations ahead of the slowest (>= 0)
  // > 1: local steps. Each worker takes this many steps of its own optimizer on a round's
  // samples (its batch split in as many parts) and pushes the round's pseudo-gradient (the
  // weights it started from less those it ended with); the server's optimizer is the outer
  // one (DiLoCo: SGD, lr 0.7, momentum 0.9, nesterov), and a worker's is not adopted.
  int local_steps = 1;
  // > 0: local steps of this many samples each: a worker's number of steps a round is its
  // batch over this (Dynamic Local Updates: a faster worker, given more samples by the
  // controller, takes more steps of the same size). Instead of local_steps.
  int64_t local_batch = 0;
  bool local() const { return local_steps > 1 || local_batch > 0; }
  absl::Duration lease = absl::Seconds(60);  // silent this long = gone
  int adjust_every = 10;                     // rounds (sync) or n-worker pushes (async); local steps: every round
  controller::ControllerOptions controller;
  OptimizerOptions optimizer;
  uint64_t data_seed = 1;  // the epochs' sample permutations
  // Sync: the round's mean weights each push by its batch (the default), or counts every
  // push once (kMean, an ablation: what equal-weight aggregation does with unequal batches).
  enum class Aggregation { kWeighted, kMean };
  Aggregation aggregation = Aggregation::kWeighted;
  AsyncRuleOptions async_rule;  // async, ssp: the per-push step's ablation switches
  // The largest model a worker may declare (float32 bytes), checked before anything is
  // allocated for it: a Join declaring more is refused with RESOURCE_EXHAUSTED.
  int64_t max_model_bytes = int64_t{4} << 30;
  // A finished job (every worker left, one at least having completed its training)
  // refuses joins; with this set the next join starts a fresh job (a new model allowed).
  bool reset_when_done = false;
  // Receives one line per event: joins, leaves, drops, readmissions, lease expiries,
  // the wait for missing workers, the end of the job. Called with the core's lock held:
  // it must not call back into the core. Null = silent.
  std::function<void(const std::string&)> log;
  // Every lease, deadline and timeout reads this clock (tests drive a FakeClock). Not owned.
  const Clock* clock = Clock::Real();
  // Tests: called without the core's lock as a sync push starts adding its gradient to
  // the round (a test holds a push there to show the others go on). Null in production.
  std::function<void(uint64_t worker_id)> before_accumulate;
  Replication replication;  // a sharded job's coordinator (docs/SHARDING.md)
};

struct JoinInfo {
  std::string name;
  std::string host;
  Device device = Device::kUnknown;
  ModelLayout layout;
  std::optional<std::vector<float>> initial_parameters;
  int64_t max_batch = 0;      // 0 = none
  uint64_t dataset_size = 0;  // > 0: the server assigns the samples this worker trains on
  uint64_t job_samples = 0;   // > 0: the samples the job trains in all (the worker's epochs)
  WorkerId resume_id = 0;     // the id of this process's previous session, when rejoining
  std::string resume_secret;  // ...and its secret: the session is replaced only when it matches
  // The worker's own optimizer (a torch.optim object): the job's when this join brings the
  // job's model, else it must equal the job's. None: the worker takes the job's.
  std::optional<WantedOptimizer> optimizer;
  bool takes_local_steps = false;  // it takes local steps when asked (JoinHeader.takes_local_steps)
};

struct JoinResult {
  Action action = Action::kContinue;  // kStop: the server is shutting down, or the job is finished (no id)
  bool job_finished = false;          // with kStop: the job is complete (global_samples, at `version`)
  uint64_t version = 0;               // ...the model's version then
  std::string secret;                 // the session's secret: later calls must carry it
  WorkerId id = 0;
  absl::Duration lease;
  Mode mode = Mode::kSync;
  int local_steps = 1;      // ServerOptions::local_steps
  int64_t local_batch = 0;  // ServerOptions::local_batch
  int64_t batch = 0;
  uint64_t global_samples = 0;
  SampleBatch samples;  // the first mini-batch's samples (with dataset_size)
  bool idle = false;    // the job's samples are all handed out: train none (see PushResult)
};

struct WorkerSnapshot {
  WorkerId id = 0;
  std::string name, host;
  Device device = Device::kUnknown;
  WorkerState state = WorkerState::kActive;
  int64_t batch = 0;
  int64_t max_batch = 0;
  double last_compute_seconds = 0;
  double mean_compute_seconds = 0;
  uint64_t iterations = 0;
  uint64_t samples = 0;
  double last_loss = 0;             // of its last accepted push
  uint64_t last_version = 0;        // the version that push was computed on
  bool expired = false;             // left because its lease ran out (not by Leave)
  uint64_t emulation_overruns = 0;  // its emulated device's steps that outlasted their time
  double predicted_seconds = 0;     // the controller's time for it at `batch` (0: unmeasured)
};

struct ServerSnapshot {
  Mode mode = Mode::kSync;
  std::string controller;
  uint64_t version = 0;
  int64_t global_batch = 0;
  uint64_t rounds = 0;
  uint64_t adjustments = 0;
  uint64_t plan_changes = 0;    // adjustments that changed a batch (and membership re-plans)
  uint64_t plan_reverts = 0;    // of them, plans taken back (noise made them: BatchPlan::reverted)
  bool plan_reverted = false;   // the plan in force is one taken back
  double predicted_spread = 1;  // of the plan in force, by the controller's time model
  uint64_t global_samples = 0;
  uint64_t parameter_count = 0;
  uint64_t dataset_size = 0;
  uint64_t job_samples = 0;  // the samples the job trains in all (0: the workers stop it)
  uint64_t job = 1;          // counts jobs run on this daemon (--reset_when_done)
  bool job_finished = false;
  double last_train_loss = 0;
  std::optional<double> test_accuracy;
  uint64_t test_accuracy_version = 0;   // the model version the accuracy was measured on
  bool accuracy_is_validation = false;  // test_accuracy is of validation data, not a test set
  double uptime_seconds = 0;
  std::vector<WorkerSnapshot> workers;
  std::map<std::string, uint64_t> pushes_by_result;  // applied, stale, invalid, ...
  std::vector<uint64_t> staleness_counts;            // async: histogram by versions behind
};

// Thread-safe. Blocking calls (Join, Push) wait at most until their deadline and the
// round timeout, and return at once after Shutdown().
// A session's secret: 16 bytes from the kernel's CSPRNG.
std::string NewSessionSecret();

class ParameterServerCore : public DataPlane {
 public:
  // InvalidArgument on bad options.
  static absl::StatusOr<std::unique_ptr<ParameterServerCore>> Create(const ServerOptions& options);

  // Registers a worker. The first worker must bring initial parameters; later ones
  // must bring the same layout (an untrained model nobody uses may be replaced). Until
  // `num_workers` have joined (or start_timeout passed) the call waits, so the first
  // round starts with everyone. While shutting down it returns action kStop.
  // InvalidArgument (bad name/layout/parameters/data set size), FailedPrecondition (no
  // model yet; the job finished), AlreadyExists (the name belongs to a live session).
  // A refused join changes nothing.
  absl::StatusOr<JoinResult> Join(JoinInfo info, absl::Time deadline);

  // Takes one gradient (mean over info.batch samples; empty for an OOM report).
  // sync: waits for the round to close (all active workers pushed, or round_timeout);
  // async: applies it at once; ssp: applies it at once, then waits while the worker is
  // more than staleness_bound iterations ahead of the slowest live worker (a worker
  // that keeps it waiting past round_timeout is dropped). The model is unchanged on any error,
  // and once a gradient is summed or applied the call never fails: reaching the deadline
  // then answers applied with a message (the sync round applies it when it closes).
  // NotFound (unknown or expired worker: rejoin), InvalidArgument (batch not the one
  // assigned, time, loss, accuracy, version from the future, size, NaN/Inf).
  absl::StatusOr<PushResult> Push(const PushInfo& info, std::vector<float> gradient, absl::Time deadline) override;

  // The current model, or only its version when the worker has it already.
  // NotFound for an unknown worker, FailedPrecondition when there is no model.
  absl::StatusOr<ModelSnapshot> Pull(WorkerId id, uint64_t have_version);
  // DataPlane: the coordinator's version is the one every shard waits for, never behind.
  absl::StatusOr<ModelSnapshot> Pull(WorkerId id, uint64_t have_version, uint64_t /*min_version*/,
                                     absl::Time /*deadline*/) override {
    return Pull(id, have_version);
  }

  // The edge (the service) calls this before acting for `id`: PermissionDenied when the
  // worker exists and `secret` is not its session's. Unknown ids pass (the call itself
  // then answers NotFound or rejoin). The core's own calls trust their caller.
  absl::Status Authenticate(WorkerId id, absl::string_view secret) const override;

  // Keeps the lease. Returns what the worker must do (kRejoin for unknown ids).
  Action Heartbeat(WorkerId id);

  // The worker leaves (`finished`: it completed its training); its share goes to the
  // others, its unfinished samples back to the epoch. NotFound.
  absl::Status Leave(WorkerId id, bool finished = false);

  // After Shutdown: waits until every live worker has left (each is told to stop by its
  // next reply or heartbeat, and leaves), or the deadline. True when all did.
  bool AwaitWorkersStopped(absl::Time deadline);

  ServerSnapshot Snapshot() const;
  // The job is finished and the next join starts another (--reset_when_done), whose model
  // may be another.
  bool NextJoinStartsNewJob() const;
  // Whether a worker may come back now: a join was refused in the last 3 s because its
  // name was still a live session's (a worker restarted before its old session's lease ran
  // out, trying again every 2 s at most), or a session's lease expired in the last lease
  // (its worker cut off or paused, which joins again once it reaches the server), or, for
  // up to kCutOffNotice or the lease (the longer) after the job finished, a worker whose
  // session the server ended unheard (its lease ran out, or a rollback ended it), or one
  // live at the checkpoint a restarted server restored, has not come back since (cut off,
  // it may reach the server only after the link heals:
  // partition_test saw a worker back 11-14 s after the heal, and chaos_test a worker cut
  // from a shard learn of the rollback only then, when a job without it can be over). A
  // finished job's server (--exit_when_done) waits for it, so that it is told the job is
  // over instead of finding no server.
  bool RejoinAwaited() const;
  // How long a worker cut off from the server takes to notice once its link is back or
  // dead for good: the keepalive (5 s, then 20 s for the answer: common/tensor_codec.h),
  // and a join's 5 s connection attempt.
  static constexpr absl::Duration kCutOffNotice = absl::Seconds(30);

  // The server's Prometheus series (server_metrics.h); its gauges are brought up to date
  // at each scrape. Callers may add series of their own (process metrics).
  metrics::Registry& registry() { return registry_; }

  // Wakes every waiting call; they and all later ones answer kStop / Unavailable.
  void Shutdown();

  // The model's layout; FailedPrecondition while there is none.
  absl::StatusOr<ModelLayout> Layout() const override;

  // Everything a checkpoint holds, taken under the lock without copying the model: the
  // weights and the optimizer state are shared (the store steps into other buffers
  // while they are held), so pushes do not wait for a copy. The controller's memory
  // covers live workers and those restored but not yet back. FailedPrecondition while
  // there is no model. A capture for a checkpoint tells a sharded job's shards to take
  // theirs at its version (Replication.checkpoint); one to read (the export) does not.
  enum class CaptureFor { kRead, kCheckpoint };
  absl::StatusOr<CheckpointState> Capture(CaptureFor purpose = CaptureFor::kRead) const;
  // Starts from a checkpoint; only before any worker joined (FailedPrecondition), and
  // only with the same mode and optimizer (FailedPrecondition, naming both). Workers that
  // join under a remembered name get their batch and time model back.
  absl::Status Restore(const CheckpointState& state);
  // A sharded job's coordinator goes back to a checkpoint of this job while it runs (a
  // shard returned: docs/SHARDING.md): the model, optimizer state, version, epoch position
  // and counters are the checkpoint's; every session ends (the workers' next calls answer
  // NotFound or rejoin; waiting pushes wake and answer so), their controller memory is
  // kept by name for their rejoin, and training goes on once they all joined again (or
  // after round_timeout); before training started (a restarted coordinator going back
  // to the checkpoint its shards hold too) the start barrier is kept. FailedPrecondition
  // for another layout, mode or optimizer.
  absl::Status RollBack(const CheckpointState& state);
  uint64_t version() const;

  const Clock& clock() const override { return *options_.clock; }
  int64_t max_model_bytes() const { return options_.max_model_bytes; }

  // join_check.h's CheckJoinHeader with this server's max_model_bytes. Join calls it;
  // the service calls it before it allocates anything for the join's parameters.
  absl::Status CheckJoinHeader(const std::string& name, const std::string& host, const ModelLayout& layout) const;

  // Buffers for assembling pushes (thread-safe, its own lock); Push returns its
  // gradient's buffer here.
  BufferPool& buffers() override { return buffers_; }

  // Records a validation failure seen before the core (bad chunks in the adapter).
  void CountRejectedPush(WorkerId id, const std::string& result) override;
  void CountUnauthenticated() override { metrics_.unauthenticated.Increment(); }
  void CountPushBytes(int64_t bytes) override;
  void CountPullBytes(int64_t bytes) override;

 private:
  using Worker = WorkerRecord;

  ParameterServerCore(const ServerOptions& options, controller::BatchController controller);

  void ExpireLeases(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the worker out of rounds and the controller (dropped or left).
  void Retire(Worker& w, WorkerState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Membership::PruneLeft, and the per-worker metric series of the names it drops.
  void PruneLeft() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a dropped worker back (from the next round on).
  void Readmit(Worker& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t LiveCount() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return workers_.LiveCount(); }
  void Account(const PushInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One step's time to the controller, and the steps it set aside to the metrics.
  void ReportStep(WorkerId id, const controller::ComputeReport& report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Event(const std::string& line) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Samples trained / the data set's size (0 without a data set).
  double Epoch() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 public:
  // A line for the server's log (ServerOptions.log), from the service's side.
  void Log(const std::string& line) const override {
    if (options_.log) options_.log(line);
  }

 private:
  // The worker's next samples: what it held and did not train goes back to the epoch.
  SampleBatch Assign(Worker& w, int64_t batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After Assign: the job's samples are all handed out and none is the worker's.
  bool Idle(const Worker& w) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A finished job: every worker left (none live or dropped) and one at least completed
  // its training.
  void MaybeFinishJob() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResetJob() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The Join's checks, before anything changes.
  absl::Status CheckJoin(const JoinInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the push's test accuracy, if any, with the version it was measured on.
  void RecordAccuracy(const PushInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Join's parts, in its order (Join holds the lock and the order):
  static JoinResult StopJoin();  // the answer to a join while shutting down
  // A finished job refuses joins (FailedPrecondition), or starts afresh (reset_when_done).
  // A join while the job is finished (and not --reset_when_done): stop, saying so; `name`
  // counts as told the job is over (RejoinAwaited).
  JoinResult FinishedJoin(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's model from the join (the first, or one replacing an untrained, unused model).
  // The optimizer a join brings for the job to adopt (none: the job keeps its own, which
  // the worker's, if it sent one, equals); FailedPrecondition when they differ.
  absl::StatusOr<std::optional<OptimizerOptions>> JoinOptimizer(const JoinInfo& info)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the joiner's model, with `optimizer` (else the flags').
  absl::Status AdoptModel(JoinInfo& info, std::optional<OptimizerOptions> optimizer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker's record, its controller entry (a remembered one restored), the event line.
  absl::StatusOr<WorkerId> AddWorker(const JoinInfo& info, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The start barrier: until the workers it expects joined, its time, the deadline or shutdown.
  void AwaitStart(absl::Time deadline, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The join's answer once past the barrier: the session, or stop.
  JoinResult JoinReply(WorkerId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OpenRound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // the first push of a round starts its clock (sync_round.h)
  // Who is in the open round (for Membership::Missing); call it under mu_.
  std::function<bool(WorkerId)> InRound() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeCompleteRound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a sync push to the round, releasing the lock for the model-sized loop.
  void AccumulateUnlocked(const PushInfo& info, const std::vector<float>& gradient) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until no push is adding to the round (a close, a reset, a new model need it).
  void AwaitRoundIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteRound() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sync, sharded with --shard_steps_ahead: the next round's members and rate to the shards
  // (Replication::round_ahead), when its step can be decided ahead.
  void DecideRoundAhead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The store's step, told to the shards first (options_.replication), then the weights
  // workers are given (ParameterStore::Predict: `predict_steps` ahead, 0 = as they are).
  void Step(const std::vector<float>& update, std::vector<ReplicatedStep::Member> members, const StepSettings& settings,
            double predict_steps = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountAdjustmentTick() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reply to a push. `batch` < 0: the worker's batch in the plan. With `assign`
  // the worker gets its next samples (unless the server stops: action kStop).
  PushResult Reply(WorkerId id, bool applied, std::string message, int64_t batch = -1, bool assign = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountPush(WorkerId id, const std::string& result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Async and ssp: applies one push at once with the staleness rule; returns the
  // staleness.
  uint64_t ApplyOnArrival(const PushInfo& info, const std::vector<float>& gradient) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adam/AdamW's weight prediction after `pusher`'s step (PredictedSteps over the other
  // live workers' batches and paces); 0 for SGD or with the prediction off.
  double PredictAhead(const WorkerRecord& pusher, const StepSettings& step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Async Adam/AdamW with --adam_weight_prediction.
  bool PredictsWeights() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RuleOf(store_.options().kind).adaptive && options_.async_rule.adam_weight_prediction;
  }
  void UpdateGauges() ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<PushResult> PushSync(const PushInfo& info, const std::vector<float>& gradient, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A sync push's wait, once it is in the round of `version`: its reply when the round
  // closes (or at the round's deadline, closing it without the missing workers).
  absl::StatusOr<PushResult> AwaitRoundClose(const PushInfo& info, uint64_t version, uint64_t rollbacks,
                                             absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker that holds no samples (PushResult::idle): present in its sync round, or
  // answered in async once the model moved; either way with the samples put back, if any.
  absl::StatusOr<PushResult> PushIdle(const PushInfo& info, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A push that ran out of memory: the controller lowers the worker's ceiling; in sync it
  // counts as present in its round and contributes nothing.
  PushResult PushOutOfMemory(const PushInfo& info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A checked gradient push, by the job's mode.
  absl::StatusOr<PushResult> PushByMode(const PushInfo& info, const std::vector<float>& gradient, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PushResult> PushLocked(const PushInfo& info, const std::vector<float>& gradient, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Restore's and RollBack's check and load: the checkpoint's mode and optimizer must be
  // this server's (FailedPrecondition, naming both); its epoch position and model go into
  // `sampler` and `store`, not yet the core's.
  absl::Status LoadCheckpoint(const CheckpointState& state, EpochSampler* sampler, ParameterStore* store) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A push that waited across a RollBack: its session is gone.
  absl::Status RolledBack(const PushInfo& info) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PushResult> PushSsp(const PushInfo& info, const std::vector<float>& gradient, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ServerOptions options_;
  const absl::Time start_time_;
  metrics::Registry registry_;
  ServerMetrics metrics_;
  mutable absl::Mutex mu_;
  controller::BatchController controller_ ABSL_GUARDED_BY(mu_);
  ParameterStore store_ ABSL_GUARDED_BY(mu_);        // its options(): the job's optimizer
  std::string optimizer_from_ ABSL_GUARDED_BY(mu_);  // the worker whose optimizer the job runs; empty: the flags'
  Membership workers_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  EpochSampler sampler_ ABSL_GUARDED_BY(mu_);
  JobLife job_ ABSL_GUARDED_BY(mu_);  // its start (for start_timeout), started, finished
  absl::Time rejoin_awaited_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();  // RejoinAwaited
  // After the job finished: until when the workers whose lease ran out are awaited, and the
  // names told since that the job is over (RejoinAwaited).
  absl::Time cut_off_awaited_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::set<std::string> told_over_ ABSL_GUARDED_BY(mu_);
  SyncRound round_ ABSL_GUARDED_BY(mu_);
  // Statistics.
  uint64_t ticks_since_adjust_ ABSL_GUARDED_BY(mu_) = 0;
  TrainingStats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t rollbacks_ ABSL_GUARDED_BY(mu_) = 0;  // a push waiting across one answers "join again"
  // From a restored checkpoint: the controller's memory of workers not yet back, by name.
  std::map<std::string, controller::WorkerMemory> remembered_ ABSL_GUARDED_BY(mu_);
  // Reusable push buffers (taken and returned outside mu_ as well).
  BufferPool buffers_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_PARAMETER_SERVER_CORE_H_
