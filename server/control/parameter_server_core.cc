#include "server/control/parameter_server_core.h"

#include <sys/random.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/constant_time.h"
#include "common/tensor_codec.h"
#include "server/checkpoint/optimizer_json.h"
#include "server/control/async_rule.h"

namespace omnilearn {
namespace server {

namespace {

// The options as the core runs them. Every store of a sharded job that clips holds slice 0
// and clips by the whole model's norm. With local steps a report is a round of many steps:
// its first is no warm-up to set aside (the warm-up is one step of them).
ServerOptions Effective(ServerOptions o) {
  if (o.replication.norm) o.optimizer.norm_reduction = o.replication.norm;
  if (o.local()) o.controller.steps.judge_first = false;
  return o;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServerCore>> ParameterServerCore::Create(const ServerOptions& options) {
  if (options.num_workers < 1) return absl::InvalidArgumentError("num_workers must be >= 1");
  if (options.adjust_every < 1) return absl::InvalidArgumentError("adjust_every must be >= 1");
  if (options.round_timeout <= absl::ZeroDuration() || options.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("round_timeout and lease must be > 0");
  }
  if (options.staleness_bound < 0) return absl::InvalidArgumentError("staleness_bound must be >= 0");
  if (options.max_model_bytes < static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError("max_model_bytes must hold at least one value");
  }
  if (options.clock == nullptr) return absl::InvalidArgumentError("a clock is required");
  if (options.round_timeout >= options.lease) {
    return absl::InvalidArgumentError("round_timeout must be shorter than the lease (a waiting worker would expire)");
  }
  if (absl::Status s = ValidateOptimizerOptions(options.optimizer); !s.ok()) return s;
  const ServerOptions effective = Effective(options);
  absl::StatusOr<controller::BatchController> c = controller::BatchController::Create(effective.controller);
  if (!c.ok()) return c.status();
  return std::unique_ptr<ParameterServerCore>(new ParameterServerCore(effective, std::move(*c)));
}

ParameterServerCore::ParameterServerCore(const ServerOptions& options, controller::BatchController controller)
    : options_(options),
      start_time_(options.clock->Now()),
      metrics_(registry_),
      controller_(std::move(controller)),
      store_(options_.optimizer),
      sampler_(options.data_seed),
      job_(start_time_, options_.num_workers, options_.start_timeout) {
  registry_.AddCollectHook([this] { UpdateGauges(); });
}

double ParameterServerCore::Epoch() const {
  return sampler_.enabled() ? static_cast<double>(stats_.global_samples()) / sampler_.dataset_size() : 0.0;
}

void ParameterServerCore::Event(const std::string& line) const {
  if (options_.log) options_.log(line);
}

void ParameterServerCore::Retire(Worker& w, WorkerState state) {
  if (state == WorkerState::kLeft && w.state != WorkerState::kLeft && options_.replication.session_closed) {
    options_.replication.session_closed(w.id);
  }
  if (w.live()) (void)controller_.RemoveWorker(w.id);
  w.state = state;
  round_.Forget(w.id);
  sampler_.Return(w.assigned);  // not trained: back to the epoch
  w.assigned.clear();
}

void ParameterServerCore::PruneLeft() {
  for (const std::string& name : workers_.PruneLeft()) metrics_.ForgetWorker(name);
}

bool ParameterServerCore::Idle(const Worker& w) const {
  return w.uses_samples && w.assigned.empty() && sampler_.exhausted();
}

SampleBatch ParameterServerCore::Assign(Worker& w, int64_t batch) {
  if (!w.uses_samples) return {};
  sampler_.Return(w.assigned);
  w.assigned = sampler_.Take(batch);
  return w.assigned;
}

void ParameterServerCore::MaybeFinishJob() {
  // A dropped worker may still come back and finish: AllLeft counts it as not gone.
  if (!job_.MaybeFinish(workers_.AllLeft())) return;
  cut_off_awaited_until_ = options_.clock->Now() + std::max(options_.lease, kCutOffNotice);
  Event(absl::StrFormat("training finished: model version %d, %d samples (%.2f epochs), %d rounds", store_.version(),
                        stats_.global_samples(), Epoch(), stats_.rounds()));
}

void ParameterServerCore::ResetJob() {
  Event(absl::StrFormat("job %d is over; a new job starts (--reset_when_done)", job_.number()));
  job_.Next(options_.clock->Now());
  controller_ = *controller::BatchController::Create(options_.controller);  // validated in Create
  store_ = ParameterStore(options_.optimizer);
  optimizer_from_.clear();
  sampler_ = EpochSampler(options_.data_seed);
  workers_.Clear();
  round_.Reset();
  ticks_since_adjust_ = 0;
  stats_ = TrainingStats();
  remembered_.clear();
  told_over_.clear();
  cut_off_awaited_until_ = absl::InfinitePast();
  if (options_.replication.job_reset) options_.replication.job_reset(job_.number());
}

void ParameterServerCore::Readmit(Worker& w) {
  Event(absl::StrCat("worker ", w.name, " is back: readmitted from the next round"));
  // Sync: pending until the round it missed closes. Async and ssp have no rounds to wait for.
  w.state = options_.mode == Mode::kSync ? WorkerState::kPending : WorkerState::kActive;
  (void)controller_.AddWorker(w.id);
  // ssp: a worker back from a drop must not hold the others to where it stopped.
  w.clock = std::max(w.clock, workers_.SlowestClock(w.id).value_or(w.clock));
}

void ParameterServerCore::ExpireLeases(absl::Time now) {
  // Before training starts the workers that joined are blocked in Join's barrier and
  // cannot send heartbeats: their leases run from the start (see Join).
  if (!job_.started()) return;
  const std::vector<Worker*> expired = workers_.LeaseExpired(now, options_.lease);
  for (Worker* w : expired) {
    Event(absl::StrFormat("worker %s (id %d): lease expired after %.0f s of silence; it left the job", w->name, w->id,
                          absl::ToDoubleSeconds(now - w->last_seen)));
    Retire(*w, WorkerState::kLeft);
    w->expired = w->ended_unheard = true;
    rejoin_awaited_until_ = std::max(rejoin_awaited_until_, now + options_.lease);
  }
  PruneLeft();
  if (!expired.empty()) {
    MaybeCompleteRound();
    MaybeFinishJob();
  }
}

std::string NewSessionSecret() {
  std::string secret(16, '\0');
  for (size_t got = 0; got < secret.size();) {
    const ssize_t n = getrandom(secret.data() + got, secret.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return secret;
}

namespace {

// The session a rejoining process may replace: its previous one, proven by its secret.
WorkerId Resumable(const Membership& workers, const JoinInfo& info) {
  const WorkerRecord* old = workers.Find(info.resume_id);
  return old != nullptr && old->name == info.name && ConstantTimeEquals(info.resume_secret, old->secret)
             ? info.resume_id
             : 0;
}

}  // namespace

absl::Status ParameterServerCore::Authenticate(WorkerId id, absl::string_view secret) const {
  absl::MutexLock lock(&mu_);
  const Worker* w = workers_.Find(id);
  if (w == nullptr) return absl::OkStatus();  // its call is answered "join again"
  return CheckSessionSecret(id, w->secret, secret);
}

absl::Status ParameterServerCore::CheckJoin(const JoinInfo& info) {
  if (const Worker* w = workers_.CurrentNamed(info.name, Resumable(workers_, info)); w != nullptr) {
    rejoin_awaited_until_ = std::max(rejoin_awaited_until_, options_.clock->Now() + absl::Seconds(3));
    return absl::AlreadyExistsError(absl::StrFormat(
        "the name '%s' belongs to a live worker (id %d on %s, last heard of %.0f s ago): give this worker another "
        "--name, or wait until that one leaves or its lease (%.0f s) expires",
        info.name, w->id, w->host, absl::ToDoubleSeconds(options_.clock->Now() - w->last_seen),
        absl::ToDoubleSeconds(options_.lease)));
  }
  if (options_.local() && !info.takes_local_steps) {
    return absl::FailedPreconditionError(
        "the job runs local steps (--local_steps or --local_batch), which this worker does not take (a release "
        "before them): it would push gradients where pseudo-gradients are due; upgrade the worker, or start the "
        "server without local steps");
  }
  const std::optional<uint64_t> job_dataset =
      sampler_.enabled() ? std::optional<uint64_t>(sampler_.dataset_size()) : std::nullopt;
  if (absl::Status s = CheckJoinDataset(info.dataset_size, job_dataset); !s.ok()) return s;
  if (absl::Status s = CheckJoinJobSamples(info.job_samples, info.dataset_size, sampler_.job_samples()); !s.ok()) {
    return s;
  }
  // An untrained model that no worker uses (its first worker broke before training) is
  // not the job's for good: a worker with another model may replace it.
  const bool replaceable = store_.version() == 0 && LiveCount() == 0 && stats_.rounds() == 0;
  return CheckJoinModel(info.layout, info.initial_parameters.has_value(),
                        store_.initialized() ? &store_.layout() : nullptr, replaceable);
}

absl::Status ParameterServerCore::CheckJoinHeader(const std::string& name, const std::string& host,
                                                  const ModelLayout& layout) const {
  return server::CheckJoinHeader(name, host, layout, options_.max_model_bytes);
}

absl::StatusOr<JoinResult> ParameterServerCore::Join(JoinInfo info, absl::Time deadline) {
  if (absl::Status s = CheckJoinHeader(info.name, info.host, info.layout); !s.ok()) return s;
  if (info.max_batch < 0 || info.max_batch > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch ", info.max_batch, " is not in [0, 2^24]"));
  }
  absl::MutexLock lock(&mu_);
  // A late worker is told the job is over.
  if (shutdown_) return job_.finished() ? FinishedJoin(info.name) : StopJoin();
  const absl::Time now = options_.clock->Now();
  ExpireLeases(now);
  AwaitRoundIdle();  // a reset or a new model must not meet a push still adding
  if (job_.finished()) {
    if (!options_.reset_when_done) return FinishedJoin(info.name);
    ResetJob();
  }
  if (absl::Status s = CheckJoin(info); !s.ok()) return s;
  absl::StatusOr<std::optional<OptimizerOptions>> optimizer = JoinOptimizer(info);
  if (!optimizer.ok()) return optimizer.status();
  // From here on the join succeeds.
  if (absl::Status s = AdoptModel(info, *std::move(optimizer)); !s.ok()) return s;
  absl::StatusOr<WorkerId> id = AddWorker(info, now);
  if (!id.ok()) return id.status();
  AwaitStart(deadline, now);
  return JoinReply(*id);
}

JoinResult ParameterServerCore::StopJoin() {
  JoinResult stop;
  stop.action = Action::kStop;
  return stop;
}

JoinResult ParameterServerCore::FinishedJoin(const std::string& name) {
  told_over_.insert(name);
  JoinResult done = StopJoin();
  done.job_finished = true;
  done.global_samples = stats_.global_samples();
  done.version = store_.version();
  return done;
}

absl::StatusOr<std::optional<OptimizerOptions>> ParameterServerCore::JoinOptimizer(const JoinInfo& info) {
  if (!info.optimizer.has_value()) return std::nullopt;
  if (options_.local()) return std::nullopt;  // the worker steps its own: the inner optimizer
  // CheckJoin passed: a join that brings parameters and meets no model of the same tensors
  // brings the job's model; any other meets an initialized store.
  const bool adopts =
      info.initial_parameters.has_value() && !(store_.initialized() && info.layout.SameTensors(store_.layout()));
  absl::StatusOr<OptimizerOptions> mirrored =
      MirrorOptimizer(*info.optimizer, options_.optimizer, adopts ? info.layout : store_.layout(),
                      /*pieces=*/static_cast<bool>(options_.replication.step));  // a sharded job: slice 0's
  if (!mirrored.ok()) return mirrored.status();
  if (adopts) return std::optional<OptimizerOptions>(*std::move(mirrored));
  const std::string why = optimizer_from_.empty()
                              ? "the server's flags or its checkpoint"
                              : absl::StrCat("from ", optimizer_from_, ", whose model the job took");
  if (absl::Status s = CheckSameOptimizer(*mirrored, adopts ? options_.optimizer : store_.options(), why); !s.ok()) {
    return s;
  }
  return std::nullopt;
}

absl::Status ParameterServerCore::AdoptModel(JoinInfo& info, std::optional<OptimizerOptions> optimizer) {
  if (store_.initialized() && info.layout.SameTensors(store_.layout())) return absl::OkStatus();
  if (store_.initialized()) {  // CheckJoin allowed it: untrained and unused
    Event(absl::StrCat("the untrained model is replaced by ", info.name, "'s (another layout)"));
  }
  // Each adopted model trains with the optimizer its worker brought, else the flags'.
  optimizer_from_ = optimizer.has_value() ? info.name : "";
  if (optimizer.has_value())
    Event(absl::StrCat("the job runs ", info.name, "'s optimizer: ", DescribeOptimizer(*optimizer)));
  store_ = ParameterStore(optimizer.value_or(options_.optimizer));
  absl::Status s = store_.Initialize(info.layout, std::move(*info.initial_parameters));
  if (s.ok() && options_.replication.optimizer) options_.replication.optimizer(store_.options());
  if (s.ok() && options_.replication.model_adopted) options_.replication.model_adopted(info.name);
  return s;
}

absl::StatusOr<WorkerId> ParameterServerCore::AddWorker(const JoinInfo& info, absl::Time now) {
  if (info.dataset_size > 0) (void)sampler_.SetDatasetSize(info.dataset_size);  // checked in CheckJoin
  (void)sampler_.SetJobSamples(info.job_samples);                               // checked in CheckJoin
  if (Worker* old = workers_.FindCurrent(Resumable(workers_, info)); old != nullptr) {
    Retire(*old, WorkerState::kLeft);  // this process's previous session
  }
  Worker w;
  w.name = info.name;
  w.host = info.host;
  w.device = info.device;
  w.last_seen = now;
  w.clock = workers_.SlowestClock(0).value_or(0);
  w.uses_samples = info.dataset_size > 0;
  w.secret = NewSessionSecret();
  // Joining an open sync round: take part from the next one.
  w.state = (options_.mode == Mode::kSync && round_.open()) ? WorkerState::kPending : WorkerState::kActive;
  // A worker a restored checkpoint remembers gets its batch and time model back.
  auto remembered = remembered_.find(info.name);
  const bool known = remembered != remembered_.end();
  const WorkerRecord& added = workers_.Add(std::move(w));
  const WorkerId id = added.id;
  if (options_.replication.session_opened) options_.replication.session_opened(id, added.secret);
  if (absl::Status s =
          controller_.AddWorker(id, {0, info.max_batch}, known ? remembered->second : controller::WorkerMemory{});
      !s.ok()) {
    workers_.Find(id)->state = WorkerState::kLeft;  // cannot happen (fresh id, valid limits); never half-added
    return s;
  }
  if (known) remembered_.erase(remembered);
  Event(
      absl::StrFormat("worker %s joined as id %d (host %s, %s)%s; %d live", info.name, id, info.host,
                      info.device == Device::kCuda ? "cuda" : (info.device == Device::kCpu ? "cpu" : "device unknown"),
                      known ? ", its controller memory restored" : "", LiveCount()));
  MaybeCompleteRound();  // a worker that retired above may have been the last one awaited
  PruneLeft();           // this name's earlier sessions
  return id;
}

void ParameterServerCore::AwaitStart(absl::Time deadline, absl::Time now) {
  if (job_.started()) return;
  const size_t live = LiveCount();
  const int expected = job_.expected();
  if (live < static_cast<size_t>(expected)) {
    Event(absl::StrFormat("waiting for %d of %d workers to join (training starts without them in %.0f s)",
                          expected - static_cast<int>(live), expected,
                          std::max(0.0, absl::ToDoubleSeconds(job_.start_by() - now))));
  }
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return job_.started() || shutdown_ || LiveCount() >= static_cast<size_t>(job_.expected());
  };
  options_.clock->AwaitWithDeadline(mu_, absl::Condition(&ready), std::min(deadline, job_.start_by()));
  if (!job_.started() && !shutdown_) {
    const size_t n = LiveCount();
    Event(n >= static_cast<size_t>(job_.expected())
              ? absl::StrFormat("all %d workers joined: training starts", job_.expected())
              : absl::StrFormat("training starts with %d of %d workers (the others did not join in time)", n,
                                job_.expected()));
  }
  job_.Start();  // with everyone, or with who came in time
}

JoinResult ParameterServerCore::JoinReply(WorkerId id) {
  Worker* me = workers_.Find(id);
  if (shutdown_ || me == nullptr) {
    // Told to stop at the barrier, it gets no session and cannot leave: it is gone now.
    if (me != nullptr && me->live()) {
      Retire(*me, WorkerState::kLeft);
      Event(absl::StrFormat("worker %s was told to stop at the start barrier; %d live", me->name, LiveCount()));
    }
    return StopJoin();
  }
  me->last_seen = options_.clock->Now();  // its call was open all along: the lease starts now
  JoinResult r;
  r.id = id;
  r.lease = options_.lease;
  r.mode = options_.mode;
  r.local_steps = options_.local_steps;
  r.local_batch = options_.local_batch;
  r.batch = controller_.plan().batch(id);
  r.global_samples = stats_.global_samples();
  r.samples = Assign(*me, r.batch);
  r.idle = Idle(*me);
  me->told_batch = r.batch;
  r.secret = me->secret;
  return r;
}

void ParameterServerCore::Account(const PushInfo& info) {
  Worker& w = *workers_.Find(info.id);
  w.iterations += 1;
  w.samples += info.batch;
  w.last_batch = info.batch;
  w.last_loss = info.train_loss;
  w.last_version = info.version;
  w.last_compute = info.compute_seconds;
  w.sum_compute += info.compute_seconds;
  // The device emulation overran in this step: its time is the host's (the count is the
  // worker's own, from its start; a worker that joined again starts over). A round of local
  // steps is the host's when a quarter of its steps or more overran: a few add little to
  // the device's time of the rest, and one in many would hide a worker from the plan.
  const uint64_t overruns =
      info.emulation_overruns > w.emulation_overruns ? info.emulation_overruns - w.emulation_overruns : 0;
  const bool overran =
      overruns > 0 &&
      (!options_.local() ||
       4 * overruns >= static_cast<uint64_t>(LocalRoundSteps(info.batch, options_.local_steps, options_.local_batch)));
  w.emulation_overruns = info.emulation_overruns;
  metrics_.worker_emulation_overruns.Add({w.name}).Set(static_cast<double>(info.emulation_overruns));
  stats_.Trained(info.batch, info.train_loss);
  metrics_.worker_compute_seconds.Add({w.name}).Observe(info.compute_seconds);
  RecordAccuracy(info);
  // The link's share of the worker's last communication: what no server held it (the
  // coordinator's hold, or a shard's wait for the other workers' slices, the longer).
  double link = 0;
  if (info.communication_seconds > 0 && w.last_wait_seconds >= 0) {
    link = std::max(0.0, info.communication_seconds - std::max(w.last_wait_seconds, info.shard_held_seconds));
    metrics_.worker_link_seconds.Add({w.name}).Observe(link);
  }
  ReportStep(info.id, {info.batch, info.compute_seconds, link, overran});
}

void ParameterServerCore::ReportStep(WorkerId id, const controller::ComputeReport& report) {
  const controller::StepsSetAside before = controller_.plan().set_aside;
  (void)controller_.Report(id, report);
  const controller::StepsSetAside& after = controller_.plan().set_aside;
  metrics_.steps_set_aside.Add({"warmup"}).Increment(static_cast<double>(after.warmup - before.warmup));
  metrics_.steps_set_aside.Add({"overran"}).Increment(static_cast<double>(after.overran - before.overran));
  metrics_.steps_set_aside.Add({"outlier"}).Increment(static_cast<double>(after.outlier - before.outlier));
}

void ParameterServerCore::RecordAccuracy(const PushInfo& info) {
  if (!info.test_accuracy) return;
  stats_.Accuracy(*info.test_accuracy, info.version, info.accuracy_is_validation);
}

void ParameterServerCore::CountAdjustmentTick() {
  // sync: one tick per round; async: one per push, adjust_every * n per adjustment.
  ++ticks_since_adjust_;
  const uint64_t per_round = options_.mode == Mode::kSync ? 1 : std::max<size_t>(1, LiveCount());
  // The first plan once every worker measured two iterations: equal batches cost the most
  // while nothing is known of the devices (at HL8 a round of them takes twice a balanced one).
  // A round of local steps is many iterations: a plan every round, the first after one.
  const uint64_t rounds = options_.local()                     ? 1
                          : controller_.plan().adjustment == 0 ? std::min<uint64_t>(2, options_.adjust_every)
                                                               : options_.adjust_every;
  if (ticks_since_adjust_ >= rounds * per_round) {
    ticks_since_adjust_ = 0;
    if (controller_.Adjust().reverted) metrics_.plan_reverts.Increment();
    metrics_.adjustments.Increment();
  }
}

PushResult ParameterServerCore::Reply(WorkerId id, bool applied, std::string message, int64_t batch, bool assign) {
  PushResult r;
  r.action = shutdown_ ? Action::kStop : Action::kContinue;
  r.next_batch = batch >= 0 ? batch : controller_.plan().batch(id);
  r.version = store_.version();
  r.applied = applied;
  r.message = std::move(message);
  r.global_samples = stats_.global_samples();
  Worker* w = workers_.Find(id);
  if (w != nullptr) w->told_batch = r.next_batch;
  if (!shutdown_ && assign && w != nullptr && w->live()) {
    r.samples = Assign(*w, r.next_batch);
    r.idle = Idle(*w);
  }
  return r;
}

void ParameterServerCore::CountPush(WorkerId id, const std::string& result) {
  stats_.CountPush(result);
  const Worker* w = workers_.Find(id);
  metrics_.pushes.Add({w == nullptr ? "unknown" : w->name, result}).Increment();
}

absl::StatusOr<PushResult> ParameterServerCore::Push(const PushInfo& info, std::vector<float> gradient,
                                                     absl::Time deadline) {
  absl::StatusOr<PushResult> r;
  {
    const absl::Time arrived = options_.clock->Now();
    absl::MutexLock lock(&mu_);
    r = PushLocked(info, gradient, deadline);
    if (r.ok()) r->held_seconds = absl::ToDoubleSeconds(options_.clock->Now() - arrived);
    if (Worker* w = workers_.FindCurrent(info.id); w != nullptr && r.ok()) w->last_wait_seconds = r->held_seconds;
  }
  buffers_.Return(std::move(gradient));
  return r;
}

absl::StatusOr<PushResult> ParameterServerCore::PushLocked(const PushInfo& info, const std::vector<float>& gradient,
                                                           absl::Time deadline) {
  auto reject = [this, &info](const char* result, absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    CountPush(info.id, result);
    return s;
  };
  if (shutdown_) {
    CountPush(info.id, "shutdown");
    return Reply(info.id, false, "the server is shutting down");  // action kStop
  }
  const absl::Time now = options_.clock->Now();
  ExpireLeases(now);
  Worker* current = workers_.FindCurrent(info.id);
  if (current == nullptr) {
    return reject("unknown_worker",
                  absl::NotFoundError(absl::StrCat("unknown or expired worker ", info.id, ": join again")));
  }
  if (!store_.initialized()) return reject("invalid", absl::FailedPreconditionError("the server has no model"));
  if (absl::Status s = CheckPushReport(info); !s.ok()) return reject("invalid", s);
  if (!info.group_lr.empty()) {  // the worker's scheduler changed the rates
    if (absl::Status s = store_.SetGroupRates(info.group_lr); !s.ok()) return reject("invalid", s);
    Event(absl::StrCat(current->name, "'s scheduler set the learning rate to ", absl::StrJoin(info.group_lr, ", ")));
  }
  if (info.report_only) {
    current->last_seen = now;
    RecordAccuracy(info);
    CountPush(info.id, "report");
    return Reply(info.id, false, "report recorded", -1, /*assign=*/false);
  }
  if (!info.idle) {
    if (absl::Status s = CheckPushGradient(info, gradient, store_.version(), store_.layout().total_elements());
        !s.ok()) {
      return reject("invalid", s);
    }
  }
  Worker& w = *current;
  w.last_seen = now;
  if (w.state == WorkerState::kDropped) {
    // Its samples went back to the epoch when it was dropped (another worker may train
    // them): this push is left out, never refused, and it trains what it is given now.
    Readmit(w);
    CountPush(info.id, "dropped");
    return Reply(info.id, false,
                 "this worker was dropped from the round it trained for (it was late): readmitted; its samples went "
                 "back to the epoch: train the batch this reply assigns");
  }
  if (info.idle) return PushIdle(info, deadline);
  const int64_t assigned = w.uses_samples ? CountSamples(w.assigned) : w.told_batch;
  if (absl::Status s = CheckAssignedBatch(info.batch, w.uses_samples, assigned, controller_.plan().batch(info.id));
      !s.ok()) {
    return reject("invalid", s);
  }
  if (info.out_of_memory) return PushOutOfMemory(info);
  return PushByMode(info, gradient, deadline);
}

PushResult ParameterServerCore::PushOutOfMemory(const PushInfo& info) {
  (void)controller_.ReportOutOfMemory(info.id, info.batch);
  CountPush(info.id, "out_of_memory");
  if (options_.mode == Mode::kSync && info.version == store_.version()) {
    OpenRound();
    round_.MarkPresent(info.id);  // counts as present, contributes nothing
    MaybeCompleteRound();
  }
  return Reply(info.id, false, absl::StrCat("out of memory at batch ", info.batch, ": batch lowered"));
}

absl::StatusOr<PushResult> ParameterServerCore::PushByMode(const PushInfo& info, const std::vector<float>& gradient,
                                                           absl::Time deadline) {
  switch (options_.mode) {
    case Mode::kSync:
      return PushSync(info, gradient, deadline);
    case Mode::kAsync: {
      const uint64_t staleness = ApplyOnArrival(info, gradient);
      PushResult r = Reply(info.id, true, "");
      r.staleness = staleness;
      return r;
    }
    case Mode::kSsp:
      return PushSsp(info, gradient, deadline);
  }
  return absl::InternalError("unknown mode");
}

absl::StatusOr<PushResult> ParameterServerCore::PushSync(const PushInfo& info, const std::vector<float>& gradient,
                                                         absl::Time deadline) {
  const uint64_t version = store_.version();
  if (info.version != version || round_.Pushed(info.id)) {
    CountPush(info.id, "stale");
    return Reply(info.id, false,
                 absl::StrCat("gradient for version ", info.version, " is late (now ", version, "): pull and go on"));
  }
  OpenRound();
  const uint64_t rollbacks = rollbacks_;
  AccumulateUnlocked(info, gradient);
  if (rollbacks_ != rollbacks) return RolledBack(info);
  Account(info);
  CountPush(info.id, "applied");
  MaybeCompleteRound();
  return AwaitRoundClose(info, version, rollbacks, deadline);
}

absl::StatusOr<PushResult> ParameterServerCore::AwaitRoundClose(const PushInfo& info, uint64_t version,
                                                                uint64_t rollbacks, absl::Time deadline) {
  auto done = [this, version, rollbacks]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || store_.version() != version || !round_.open() || rollbacks_ != rollbacks;
  };
  while (!done()) {
    const absl::Time until = std::min(deadline, round_.deadline());
    if (!options_.clock->AwaitWithDeadline(mu_, absl::Condition(&done), until)) {
      if (options_.clock->Now() >= round_.deadline() && round_.open() && store_.version() == version) {
        AwaitRoundIdle();                                                   // a push still adding is in the round
        if (round_.open() && store_.version() == version) CompleteRound();  // timed out: go on without the missing
      } else if (options_.clock->Now() >= deadline) {
        // The gradient is in the round (applied when it closes): never an error now.
        return Reply(info.id, !info.idle,
                     "the round had not closed by the call's deadline; the gradient is in it: pull");
      }
    }
  }
  if (rollbacks_ != rollbacks) return RolledBack(info);
  const bool closed = store_.version() != version;
  return Reply(info.id, closed && !info.idle, closed ? "" : "the server is shutting down: the round did not close",
               store_.version() == version + 1 ? round_.batch_for(info.id) : -1);
}

absl::StatusOr<PushResult> ParameterServerCore::PushIdle(const PushInfo& info, absl::Time deadline) {
  const Worker& w = *workers_.FindCurrent(info.id);
  const uint64_t version = store_.version();
  absl::Status refused;
  if (!w.assigned.empty()) {
    refused = absl::FailedPreconditionError(absl::StrCat("an idle push from worker ", info.id, ", assigned ",
                                                         CountSamples(w.assigned), " samples: train them"));
  } else {
    refused = CheckPushVersion(info.version, version);
  }
  CountPush(info.id, refused.ok() ? "idle" : "invalid");
  if (!refused.ok()) return refused;
  if (options_.mode == Mode::kSync && info.version == version && !round_.Pushed(info.id)) {
    // Present in the round, contributing nothing; answered when it closes, with the
    // samples a lost worker put back, if any.
    OpenRound();
    round_.MarkPresent(info.id);
    MaybeCompleteRound();
    return AwaitRoundClose(info, version, rollbacks_, deadline);
  }
  if (options_.mode != Mode::kSync) {
    // Answered once the model moves (another worker's samples trained) or something was
    // put back, so that an idle worker does not spin.
    auto moved = [this, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutdown_ || store_.version() != version || !sampler_.exhausted();
    };
    options_.clock->AwaitWithDeadline(mu_, absl::Condition(&moved),
                                      std::min(deadline, options_.clock->Now() + options_.round_timeout));
  }
  return Reply(info.id, false, "");
}

void ParameterServerCore::AccumulateUnlocked(const PushInfo& info, const std::vector<float>& gradient) {
  Worker& w = *workers_.Find(info.id);
  const double weight = options_.aggregation == ServerOptions::Aggregation::kMean ? 1.0 : info.batch;
  // The round counts the push in flight, so it neither closes nor resets meanwhile: the
  // model-sized sum runs without the lock, beside other workers' pushes, heartbeats and
  // pulls. Whatever else changes meanwhile (a leave, a shutdown) is read afresh after.
  RoundSum* sum = round_.Reserve(info.id, std::exchange(w.assigned, {}));  // trained when the round closes
  mu_.Unlock();
  if (options_.before_accumulate) options_.before_accumulate(info.id);
  SyncRound::Accumulate(sum, info.id, weight, gradient);
  mu_.Lock();
  round_.Commit(info.id, info.batch, weight);
}

void ParameterServerCore::AwaitRoundIdle() {
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return round_.idle(); };
  mu_.Await(absl::Condition(&idle));  // bounded: an accumulation is a memory loop
}

void ParameterServerCore::OpenRound() {
  round_.Open(options_.clock->Now(), options_.round_timeout, store_.layout().total_elements());
}

std::function<bool(WorkerId)> ParameterServerCore::InRound() const {
  return [this](WorkerId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return round_.Pushed(id); };
}

void ParameterServerCore::MaybeCompleteRound() {
  if (!round_.open() || !round_.idle()) return;  // a push in flight completes it when it lands
  if (workers_.Missing(InRound()).empty()) CompleteRound();
}

void ParameterServerCore::CompleteRound() {
  // Workers that were due and did not push are dropped; their share goes to the others.
  for (Worker* w : workers_.Missing(InRound())) {
    Event(absl::StrFormat("worker %s missed the round's deadline (%.0f s): dropped until it pushes again", w->name,
                          absl::ToDoubleSeconds(options_.round_timeout)));
    Retire(*w, WorkerState::kDropped);
  }
  if (round_.samples() > 0) {
    // The weighted mean, folded into the step: sum(b_k g_k) / sum(b_k).
    store_.SetEpoch(Epoch());
    std::vector<ReplicatedStep::Member> members;
    for (const auto& [id, weight] : round_.contributions()) members.push_back({id, store_.version(), weight});
    StepSettings mean;  // sum(b_k g_k) / sum(b_k), the optimizer's own momentum
    mean.update_scale = MeanScale(members);
    Step(round_.sum(), std::move(members), mean);
    stats_.Round();
    metrics_.rounds.Increment();
    metrics_.round_wait_seconds.Observe(absl::ToDoubleSeconds(options_.clock->Now() - round_.opened()));
  }
  workers_.PromotePending();
  DecideRoundAhead();
  if (stats_.rounds() > 0) CountAdjustmentTick();
  // Every member of the round is told the plan as it stood when the round closed, even
  // if another member leaves (and its share moves) before this one wakes up. Its
  // samples are trained.
  const auto& plan = controller_.plan();  // read under mu_, here; Close runs before it returns
  round_.Close([&plan](WorkerId id) { return plan.batch(id); });
}

void ParameterServerCore::DecideRoundAhead() {
  const OptimizerOptions& optimizer = store_.options();
  if (!options_.replication.round_ahead || optimizer.clip_grad_norm > 0 || store_.group_count() > 1 ||
      (optimizer.schedule == LrSchedule::kStep && optimizer.lr_decay_epochs > 0)) {
    return;
  }
  RoundAhead round;
  round.version = store_.version();
  round.members = workers_.ActiveIds();
  round.learning_rate = store_.LearningRate();  // Step's, at lr_scale 1
  round.weigh_by_batch = options_.aggregation == ServerOptions::Aggregation::kWeighted;
  if (!round.members.empty()) options_.replication.round_ahead(round);
}

void ParameterServerCore::Step(const std::vector<float>& update, std::vector<ReplicatedStep::Member> members,
                               const StepSettings& settings, double predict_steps) {
  const uint64_t version = store_.version();
  const uint64_t history = ExtendHistory(store_.history(), version, members);
  if (options_.replication.step) {
    ReplicatedStep step;
    step.version = version;
    step.members = std::move(members);
    step.settings = settings;
    step.settings.learning_rate = store_.LearningRate() * settings.lr_scale;
    if (store_.group_count() > 1) {
      for (size_t g = 0; g < store_.group_count(); ++g)
        step.settings.group_rates.push_back(store_.GroupRate(g) * settings.lr_scale);
    }
    step.predict_steps = predict_steps;
    options_.replication.step(step);
  }
  store_.Apply(update, settings);
  store_.Predict(predict_steps);
  store_.set_history(history);
}

uint64_t ParameterServerCore::ApplyOnArrival(const PushInfo& info, const std::vector<float>& gradient) {
  const uint64_t s = store_.version() - info.version;  // versions the model moved since the worker pulled
  // SGD's momentum or Adam's beta1 (OptimizerRule::momentum): asynchrony adds momentum of
  // its own to either. The job's optimizer: the flags' or a worker's.
  const std::optional<Hp> momentum_hp = RuleOf(store_.options().kind).momentum;
  const double momentum = momentum_hp ? store_.Hyper(0)[static_cast<int>(*momentum_hp)] : 0;
  const StepSettings step = AsyncStepFor(info.batch, options_.controller.global_batch, LiveCount(), s, momentum,
                                         options_.async_rule, PredictsWeights());
  store_.SetEpoch(Epoch());
  WorkerRecord& me = *workers_.Find(info.id);
  me.NotePush(options_.clock->Now());
  Step(gradient, {{info.id, info.version, 1.0}}, step, PredictAhead(me, step));
  me.assigned.clear();  // trained
  stats_.CountStaleness(s);
  metrics_.staleness.Observe(static_cast<double>(s));
  Account(info);
  CountPush(info.id, "applied");
  stats_.Round();
  metrics_.rounds.Increment();
  CountAdjustmentTick();
  return s;
}

double ParameterServerCore::PredictAhead(const WorkerRecord& pusher, const StepSettings& step) const {
  // Adam's steps follow the moments' direction, so the steps the other live workers' pushes
  // take before this worker's next gradient lands are about its last one, resized.
  if (!PredictsWeights()) return 0;
  std::vector<PeerPace> peers;
  for (const auto& [id, w] : workers_) {
    if (id != pusher.id && w.live()) {
      peers.push_back({w.told_batch > 0 ? w.told_batch : w.last_batch, w.push_interval});
    }
  }
  return PredictedSteps(step, pusher.push_interval, peers, options_.controller.global_batch, options_.async_rule);
}

absl::StatusOr<PushResult> ParameterServerCore::PushSsp(const PushInfo& info, const std::vector<float>& gradient,
                                                        absl::Time deadline) {
  const uint64_t staleness = ApplyOnArrival(info, gradient);
  Worker& me = *workers_.Find(info.id);
  ++me.clock;
  const std::string name = me.name;  // `me` may leave (and its record go) while this push waits
  const uint64_t bound = static_cast<uint64_t>(options_.staleness_bound);
  const uint64_t rollbacks = rollbacks_;
  auto within_bound = [this, &info, bound, rollbacks]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || rollbacks_ != rollbacks || workers_.WithinSspBound(info.id, bound);
  };
  if (!within_bound()) {
    const absl::Time start = options_.clock->Now();
    const absl::Time drop_at = start + options_.round_timeout;
    while (!within_bound()) {
      if (options_.clock->AwaitWithDeadline(mu_, absl::Condition(&within_bound), std::min(deadline, drop_at))) break;
      if (options_.clock->Now() >= drop_at) {
        // Whoever holds this worker back past the timeout is dropped, as a late worker
        // is from a sync round; it is readmitted when it pushes again.
        for (Worker* w : workers_.HoldingBack(info.id, bound)) {
          Event(absl::StrFormat("worker %s held %s back for %.0f s: dropped until it pushes again", w->name, name,
                                absl::ToDoubleSeconds(options_.round_timeout)));
          Retire(*w, WorkerState::kDropped);
        }
      } else if (options_.clock->Now() >= deadline) {
        // The gradient was applied on arrival: never an error now.
        PushResult r = Reply(info.id, true, "the slowest worker had not caught up by the call's deadline");
        r.staleness = staleness;
        return r;
      }
    }
    metrics_.round_wait_seconds.Observe(absl::ToDoubleSeconds(options_.clock->Now() - start));
  }
  if (rollbacks_ != rollbacks) return RolledBack(info);
  PushResult r = Reply(info.id, true, "");
  r.staleness = staleness;
  return r;
}

absl::StatusOr<ModelSnapshot> ParameterServerCore::Pull(WorkerId id, uint64_t have_version) {
  absl::MutexLock lock(&mu_);
  Worker* w = workers_.FindCurrent(id);
  if (w == nullptr) return absl::NotFoundError(absl::StrCat("unknown or expired worker ", id, ": join again"));
  if (!store_.initialized()) return absl::FailedPreconditionError("the server has no model");
  w->last_seen = options_.clock->Now();
  ModelSnapshot snap;
  snap.version = store_.version();
  snap.history = store_.history();
  snap.layout = store_.layout();
  if (have_version != snap.version) snap.weights = store_.served();
  return snap;
}

Action ParameterServerCore::Heartbeat(WorkerId id) {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return Action::kStop;
  ExpireLeases(options_.clock->Now());
  Worker* w = workers_.FindCurrent(id);
  if (w == nullptr) return Action::kRejoin;
  w->last_seen = options_.clock->Now();
  return Action::kContinue;
}

absl::Status ParameterServerCore::Leave(WorkerId id, bool finished) {
  absl::MutexLock lock(&mu_);
  Worker* w = workers_.FindCurrent(id);
  if (w == nullptr) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
  Retire(*w, WorkerState::kLeft);
  Event(absl::StrFormat("worker %s left (%s) after %d iterations; %d live", w->name,
                        finished ? "finished its training" : (shutdown_ ? "told to stop" : "interrupted"),
                        w->iterations, LiveCount()));
  job_.NoteLeft(finished);
  MaybeCompleteRound();
  MaybeFinishJob();
  PruneLeft();
  return absl::OkStatus();
}

bool ParameterServerCore::AwaitWorkersStopped(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto all_gone = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return LiveCount() == 0; };
  return options_.clock->AwaitWithDeadline(mu_, absl::Condition(&all_gone), deadline);
}

absl::StatusOr<ModelLayout> ParameterServerCore::Layout() const {
  absl::MutexLock lock(&mu_);
  if (!store_.initialized()) return absl::FailedPreconditionError("the server has no model");
  return store_.layout();
}

absl::StatusOr<CheckpointState> ParameterServerCore::Capture(CaptureFor purpose) const {
  absl::MutexLock lock(&mu_);
  if (!store_.initialized()) return absl::FailedPreconditionError("the server has no model yet");
  CheckpointState s = CaptureStore(store_);
  s.optimizer_from = optimizer_from_;
  s.mode = ModeName(options_.mode);
  // The open round's pushes are counted as trained already, but their samples are
  // outstanding (handed out again on restore): not trained in the checkpoint.
  s.global_samples = stats_.global_samples() - static_cast<uint64_t>(round_.samples());
  s.rounds = stats_.rounds();
  s.adjustments = controller_.plan().adjustment;
  s.controller = remembered_;
  for (const auto& [id, w] : workers_) {
    if (!w.live()) continue;
    if (absl::StatusOr<controller::WorkerMemory> m = controller_.Remember(id); m.ok()) s.controller[w.name] = *m;
  }
  std::vector<const SampleBatch*> outstanding = {&round_.sample_ids()};
  for (const auto& [id, w] : workers_) outstanding.push_back(&w.assigned);
  s.sampler = sampler_.State(outstanding);
  s.job = job_.number();
  s.created = options_.clock->Now();
  if (purpose == CaptureFor::kCheckpoint && options_.replication.checkpoint) {
    options_.replication.checkpoint(s.version, s.history);
  }
  return s;
}

absl::Status ParameterServerCore::LoadCheckpoint(const CheckpointState& state, EpochSampler* sampler,
                                                 ParameterStore* store) const {
  if (state.mode != ModeName(options_.mode)) {
    return absl::FailedPreconditionError(absl::StrCat("the checkpoint was taken in mode ", state.mode,
                                                      ", the server runs in mode ", ModeName(options_.mode),
                                                      ": use the same --mode, or --fresh to start over"));
  }
  if (state.optimizer != OptimizerName(store->options().kind)) {
    return absl::FailedPreconditionError(absl::StrCat("the checkpoint's optimizer is ", state.optimizer,
                                                      ", the server's is ", OptimizerName(store->options().kind),
                                                      ": use the same --optimizer, or --fresh to start over"));
  }
  if (absl::Status s = sampler->Restore(state.sampler); !s.ok()) return s;
  return RestoreStore(state, store);  // refuses a checkpoint without weights
}

absl::Status ParameterServerCore::Restore(const CheckpointState& state) {
  absl::MutexLock lock(&mu_);
  if (store_.initialized() || !workers_.empty()) {
    return absl::FailedPreconditionError("a checkpoint can only be restored before any worker joined");
  }
  EpochSampler sampler(options_.data_seed);
  // A job that ran a worker's optimizer goes on with it (the flags' schedule and clipping).
  OptimizerOptions optimizer = options_.optimizer;
  if (!state.optimizer_from.empty() && state.optimizer_options.has_value()) {
    absl::StatusOr<OptimizerOptions> theirs = ParseOptimizerJson(OptimizerJson(*state.optimizer_options), optimizer);
    if (!theirs.ok()) return theirs.status();
    optimizer = *std::move(theirs);
  }
  ParameterStore store(optimizer);
  if (absl::Status s = LoadCheckpoint(state, &sampler, &store); !s.ok()) return s;
  store_ = std::move(store);
  optimizer_from_ = state.optimizer_options.has_value() ? state.optimizer_from : "";
  if (options_.replication.optimizer) options_.replication.optimizer(store_.options());
  sampler_ = std::move(sampler);
  stats_.Restore(state.global_samples, state.rounds);
  remembered_ = state.controller;
  return absl::OkStatus();
}

absl::Status ParameterServerCore::RollBack(const CheckpointState& state) {
  absl::MutexLock lock(&mu_);
  if (!store_.initialized() || !(state.layout == store_.layout())) {
    return absl::FailedPreconditionError("the checkpoint is of another model than the job's");
  }
  EpochSampler sampler(options_.data_seed);
  ParameterStore store(store_.options());  // the job's optimizer (a worker's, if it brought one)
  if (absl::Status s = LoadCheckpoint(state, &sampler, &store); !s.ok()) return s;
  (void)sampler.SetJobSamples(sampler_.job_samples());  // the job's end stays where the workers put it
  AwaitRoundIdle();
  std::map<std::string, controller::WorkerMemory> remembered = state.controller;
  // Training goes on once the workers of this moment joined again, or after a lease: a
  // live worker rejoins within it (its backoff and a shard's return included), and one
  // that went on alone would train the epoch's samples with a lone worker's batch.
  job_.Regather(options_.clock->Now(), static_cast<int>(LiveCount()), options_.lease);
  for (auto& [id, w] : workers_) {
    if (w.state == WorkerState::kLeft) continue;
    if (absl::StatusOr<controller::WorkerMemory> m = controller_.Remember(id); m.ok()) remembered[w.name] = *m;
    // Every session ends, a dropped one's too (leases run only once training starts, and
    // the start may wait for that very worker's restarted process, which the old session
    // would refuse its name); what it held goes with the old epoch position. Its name is in
    // remembered_ until it joins again, so RejoinAwaited() awaits it past the job's end.
    Retire(w, WorkerState::kLeft);
  }
  store_ = std::move(store);
  sampler_ = std::move(sampler);
  stats_.Restore(state.global_samples, state.rounds);
  remembered_ = std::move(remembered);
  round_.Reset();
  ++rollbacks_;
  PruneLeft();
  Event(
      absl::StrFormat("the job went back to its checkpoint of version %d (%d samples trained): every worker joins "
                      "again",
                      state.version, state.global_samples));
  return absl::OkStatus();
}

absl::Status ParameterServerCore::RolledBack(const PushInfo& info) const {
  return absl::NotFoundError(absl::StrCat("worker ", info.id,
                                          "'s session ended: the job went back to its checkpoint "
                                          "of version ",
                                          store_.version(), "; join again"));
}

uint64_t ParameterServerCore::version() const {
  absl::MutexLock lock(&mu_);
  return store_.version();
}

void ParameterServerCore::CountRejectedPush(WorkerId id, const std::string& result) {
  absl::MutexLock lock(&mu_);
  CountPush(id, result);
}

void ParameterServerCore::CountPushBytes(int64_t bytes) { metrics_.push_bytes.Increment(static_cast<double>(bytes)); }

void ParameterServerCore::CountPullBytes(int64_t bytes) { metrics_.pull_bytes.Increment(static_cast<double>(bytes)); }

void ParameterServerCore::UpdateGauges() {
  absl::MutexLock lock(&mu_);
  metrics_.CollectModel(store_.version(), stats_.last_loss(), stats_.test_accuracy());
  metrics_.CollectWorkers(
      workers_, [this](WorkerId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return controller_.plan().batch(id); });
}

void ParameterServerCore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

bool ParameterServerCore::RejoinAwaited() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.clock->Now();
  if (now < rejoin_awaited_until_) return true;
  if (!job_.finished() || now >= cut_off_awaited_until_) return false;
  for (const std::string& name : workers_.UnheardNames()) {
    if (told_over_.count(name) == 0) return true;  // its session ended unheard, not back since
  }
  for (const auto& [name, memory] : remembered_) {
    // Live at the checkpoint this server restored (a restart) or when the job went back to
    // one (a rollback), and not back since: cut off meanwhile, it may reach the server only
    // after the link heals.
    if (told_over_.count(name) == 0) return true;
  }
  return false;
}

bool ParameterServerCore::NextJoinStartsNewJob() const {
  absl::MutexLock lock(&mu_);
  return options_.reset_when_done && job_.finished();
}

ServerSnapshot ParameterServerCore::Snapshot() const {
  absl::MutexLock lock(&mu_);
  ServerSnapshot s;
  s.mode = options_.mode;
  s.controller = controller::PolicyName(options_.controller.policy);
  s.version = store_.version();
  s.global_batch = options_.controller.global_batch;
  s.rounds = stats_.rounds();
  s.adjustments = controller_.plan().adjustment;
  s.plan_changes = controller_.plan().changes;
  s.plan_reverts = controller_.plan().reverts;
  s.plan_reverted = controller_.plan().reverted;
  s.predicted_spread = controller_.plan().predicted_spread;
  s.global_samples = stats_.global_samples();
  s.parameter_count = store_.initialized() ? store_.layout().total_elements() : 0;
  s.dataset_size = sampler_.dataset_size();
  s.job_samples = sampler_.job_samples();
  s.job = job_.number();
  s.job_finished = job_.finished();
  s.last_train_loss = stats_.last_loss();
  s.test_accuracy = stats_.test_accuracy();
  s.test_accuracy_version = stats_.test_accuracy_version();
  s.accuracy_is_validation = stats_.accuracy_is_validation();
  s.uptime_seconds = absl::ToDoubleSeconds(options_.clock->Now() - start_time_);
  s.pushes_by_result = stats_.pushes_by_result();
  s.staleness_counts = stats_.staleness_counts();
  for (const auto& [id, w] : workers_) {
    WorkerSnapshot ws;
    ws.id = id;
    ws.name = w.name;
    ws.host = w.host;
    ws.device = w.device;
    ws.state = w.state;
    // A departed worker: what the plan last gave it (its last batch may be the job's short end).
    ws.batch = w.live() ? controller_.plan().batch(id) : (w.told_batch > 0 ? w.told_batch : w.last_batch);
    auto p = controller_.plan().workers.find(id);
    ws.max_batch = p == controller_.plan().workers.end() ? 0 : p->second.max_batch;
    ws.predicted_seconds = p == controller_.plan().workers.end() ? 0 : p->second.predicted_seconds;
    ws.emulation_overruns = w.emulation_overruns;
    ws.last_compute_seconds = w.last_compute;
    ws.mean_compute_seconds = w.iterations ? w.sum_compute / w.iterations : 0;
    ws.iterations = w.iterations;
    ws.samples = w.samples;
    ws.expired = w.expired;
    ws.last_loss = w.last_loss;
    ws.last_version = w.last_version;
    s.workers.push_back(ws);
  }
  return s;
}

}  // namespace server
}  // namespace omnilearn
