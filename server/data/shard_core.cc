#include "server/data/shard_core.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/control/push_check.h"

namespace omnilearn {
namespace server {

ShardCore::ShardCore(ShardCoreOptions options)
    : options_(std::move(options)),
      push_bytes_(
          registry_.AddCounter("omnilearn_shard_push_bytes_total", "gradient bytes pushed to this shard").Add({})),
      pull_bytes_(registry_.AddCounter("omnilearn_shard_pull_bytes_total", "model bytes this shard sent").Add({})),
      slice_bytes_(registry_.AddGauge("omnilearn_shard_slice_bytes", "float32 bytes of this shard's slice").Add({})),
      version_gauge_(registry_.AddGauge("omnilearn_shard_model_version", "the version of this shard's slice").Add({})),
      step_seconds_(registry_
                        .AddHistogram("omnilearn_shard_step_seconds",
                                      "from the coordinator's step to this slice stepped (the wait for the members' "
                                      "slices included)",
                                      {}, {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30})
                        .Add({})),
      command_wait_seconds_(registry_
                                .AddHistogram("omnilearn_shard_step_command_wait_seconds",
                                              "how long a step's members' slices were all here before the "
                                              "coordinator's step command came (0 when it came first)",
                                              {}, {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1})
                                .Add({})),
      slices_left_out_(registry_
                           .AddCounter("omnilearn_shard_slices_left_out_total",
                                       "members' slices a step went without (they did not come in the round timeout)")
                           .Add({})),
      summed_on_arrival_(registry_
                             .AddCounter("omnilearn_shard_steps_summed_on_arrival_total",
                                         "sync steps whose sum was built as the members' slices arrived (the others "
                                         "summed them at the coordinator's command)")
                             .Add({})),
      steps_ahead_(registry_
                       .AddCounter("omnilearn_shard_steps_ahead_total",
                                   "sync steps taken as soon as the round's members' slices were in, before the "
                                   "coordinator's command (--shard_steps_ahead)")
                       .Add({})),
      ahead_refused_(registry_
                         .AddCounter("omnilearn_shard_steps_ahead_refused_total",
                                     "steps taken ahead that the coordinator's command did not confirm (the job went "
                                     "back to its common checkpoint)")
                         .Add({})),
      unauthenticated_(registry_
                           .AddCounter("omnilearn_unauthenticated_total",
                                       "Calls refused for a missing or wrong bearer token or peer secret.")
                           .Add({})) {}

namespace {

// The job's optimizer over a slice. Each step brings its own rate (the coordinator's), so
// the store's schedule is never consulted.
absl::StatusOr<std::unique_ptr<ParameterStore>> SliceStore(OptimizerOptions optimizer) {
  optimizer.norm_reduction = nullptr;  // a clipped step brings the whole model's norm (ShardCore::NormToClipBy)
  if (absl::Status s = ValidateOptimizerOptions(optimizer); !s.ok()) return s;
  return std::make_unique<ParameterStore>(optimizer);
}

}  // namespace

absl::Status ShardCore::Init(ModelLayout slice, std::vector<float> values, uint64_t version, OptimizerOptions optimizer,
                             absl::Duration member_wait, bool sync) {
  absl::StatusOr<std::unique_ptr<ParameterStore>> store = SliceStore(optimizer);
  if (!store.ok()) return store.status();
  if (absl::Status s = (*store)->Initialize(std::move(slice), std::move(values), version); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (store_ != nullptr && store_->version() != version && !job_ended_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("this shard's slice is at version %d and the coordinator sends version %d: restart the shard",
                        store_->version(), version));
  }
  Install(*std::move(store), member_wait, sync);
  return absl::OkStatus();
}

absl::Status ShardCore::Restore(const ModelLayout& slice, const CheckpointState& checkpoint, OptimizerOptions optimizer,
                                absl::Duration member_wait, bool sync) {
  if (!(checkpoint.layout == slice)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the checkpoint of version ", checkpoint.version,
                     " holds another slice than this shard's: ", checkpoint.layout.DescribeDifference(slice)));
  }
  if (checkpoint.optimizer != OptimizerName(optimizer.kind)) {
    return absl::InvalidArgumentError(absl::StrCat("the checkpoint's optimizer is ", checkpoint.optimizer,
                                                   ", the job's is ", OptimizerName(optimizer.kind)));
  }
  absl::StatusOr<std::unique_ptr<ParameterStore>> store = SliceStore(optimizer);
  if (!store.ok()) return store.status();
  if (absl::Status s = RestoreStore(checkpoint, store->get()); !s.ok()) return s;  // its layout is `slice`
  absl::MutexLock lock(&mu_);
  Install(*std::move(store), member_wait, sync);
  sessions_.clear();
  return absl::OkStatus();
}

void ShardCore::EndJob() {
  absl::MutexLock lock(&mu_);
  sessions_.clear();
  pending_.clear();
  ahead_.reset();
  job_ended_ = true;
}

void ShardCore::Install(std::unique_ptr<ParameterStore> store, absl::Duration member_wait, bool sync) {
  AwaitNoStep();  // an ahead step on a push's thread finishes on the store it began on
  ahead_.reset();
  taken_ahead_.reset();
  before_ahead_.reset();
  store_ = std::move(store);
  job_ended_ = false;
  slice_bytes_.Set(static_cast<double>(store_->layout().total_elements()) * sizeof(float));
  version_gauge_.Set(static_cast<double>(store_->version()));
  member_wait_ = member_wait;
  sync_ = sync;
  pending_.clear();   // a push waiting answers "not applied"
  arrival_.Forget();  // what was summed is of the values replaced, even at the same version
}

absl::StatusOr<CheckpointState> ShardCore::Capture() const {
  absl::MutexLock lock(&mu_);
  if (store_ == nullptr) return absl::FailedPreconditionError("this shard has no slice yet");
  return Stamped(CaptureStore(*store_));
}

absl::StatusOr<CheckpointState> ShardCore::CaptureAt(uint64_t version) const {
  absl::MutexLock lock(&mu_);
  if (store_ == nullptr) return absl::FailedPreconditionError("this shard has no slice yet");
  if (store_->version() == version) return Stamped(CaptureStore(*store_));
  if (before_ahead_.has_value() && before_ahead_->version == version) return Stamped(*before_ahead_);
  // The slice and the coordinator disagree on where the job is: the job goes back to its
  // common checkpoint (Aborted: the shard registers again).
  return absl::AbortedError(absl::StrFormat("the coordinator's checkpoint is of version %d, and this slice is at %d",
                                            version, store_->version()));
}

CheckpointState ShardCore::Stamped(CheckpointState s) const {
  s.mode = sync_ ? "sync" : "async";
  s.created = options_.clock->Now();
  return s;
}

bool ShardCore::initialized() const {
  absl::MutexLock lock(&mu_);
  return store_ != nullptr;
}

uint64_t ShardCore::version() const {
  absl::MutexLock lock(&mu_);
  return store_ == nullptr ? 0 : store_->version();
}

void ShardCore::OpenSession(WorkerId id, std::string secret) {
  absl::MutexLock lock(&mu_);
  sessions_[id] = std::move(secret);
}

void ShardCore::CloseSession(WorkerId id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(id);
  pending_.erase(id);
}

bool ShardCore::HasSession(WorkerId id) const {
  absl::MutexLock lock(&mu_);
  return sessions_.count(id) > 0;
}

void ShardCore::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

absl::Status ShardCore::NoSession(WorkerId id) {
  return absl::NotFoundError(absl::StrCat("worker ", id, " has no session on this shard: join the coordinator"));
}

absl::Status ShardCore::Authenticate(WorkerId id, absl::string_view secret) const {
  absl::MutexLock lock(&mu_);
  // The coordinator announced the session when the worker joined, on a stream of its own:
  // the worker's first call here may come before it.
  auto announced = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_ || sessions_.count(id) > 0; };
  options_.clock->AwaitWithDeadline(mu_, absl::Condition(&announced), options_.clock->Now() + kAnnouncementWait);
  auto it = sessions_.find(id);
  // Refused at the header: nothing of an unknown session's push is read (report-only and
  // out-of-memory pushes included).
  if (it == sessions_.end()) return NoSession(id);
  return CheckSessionSecret(id, it->second, secret);
}

absl::StatusOr<PushResult> ShardCore::Push(const PushInfo& info, std::vector<float> gradient, absl::Time deadline) {
  if (info.out_of_memory || info.report_only || info.idle) {  // nothing of this slice: the coordinator handles them
    {
      absl::MutexLock lock(&mu_);
      if (sessions_.count(info.id) == 0) return NoSession(info.id);
    }
    PushResult r;
    r.version = version();
    return r;
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckSlicePush(info, gradient); !s.ok()) return s;
  if (std::optional<PushResult> answered = AnswerAtOnce(info, gradient)) return *answered;
  Hold(info, std::move(gradient));
  MaybeStepAhead();  // this slice may be the round's last (the lock is released meanwhile)
  return AwaitTaken(info.id, deadline);
}

absl::Status ShardCore::CheckSlicePush(const PushInfo& info, const std::vector<float>& gradient) const {
  if (sessions_.count(info.id) == 0) return NoSession(info.id);
  if (store_ == nullptr) return absl::FailedPreconditionError("this shard has no slice yet");
  if (absl::Status s = CheckPushVersion(info.version, store_->version()); !s.ok()) return s;
  return CheckGradientValues(gradient, store_->layout().total_elements(), info.finite_checked);
}

std::optional<PushResult> ShardCore::AnswerAtOnce(const PushInfo& info, std::vector<float>& gradient) {
  PushResult r;
  r.version = store_->version();
  if (info.resend && AlreadyTaken(info.id, info.version)) {
    // Its first sending was taken and the reply to it lost: taking it again would count the
    // gradient twice.
    r.applied = true;
  } else if (sync_ && info.version < store_->version()) {
    // Sync: the round of its version was stepped already, and no later step takes it. Held,
    // it would keep its worker (late after a pause) from the next round until member_wait,
    // which that round's deadline may not outlast: the worker would miss every round.
    r.message = "the round of this slice's version was stepped without it";
  } else {
    return std::nullopt;
  }
  buffers_.Return(std::move(gradient));
  return r;
}

void ShardCore::Hold(const PushInfo& info, std::vector<float> gradient) {
  AddOnArrival(info, gradient);
  Pending& p = pending_[info.id];
  if (!p.gradient.empty()) buffers_.Return(std::move(p.gradient));  // never taken: the coordinator left it out
  p = Pending{info.version, std::move(gradient)};
  p.arrived = options_.clock->Now();
  p.batch = static_cast<double>(info.batch);
}

PushResult ShardCore::AwaitTaken(WorkerId id, absl::Time deadline) {
  // Until a step takes it. A resend of this slice (a second slot: the worker lost this
  // sending's connection) may replace it meanwhile with the same values; the step answers both.
  auto done = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = pending_.find(id);
    return shutdown_ || it == pending_.end() || it->second.taken || it->second.released;
  };
  options_.clock->AwaitWithDeadline(mu_, absl::Condition(&done),
                                    std::min(deadline, options_.clock->Now() + member_wait_));
  auto it = pending_.find(id);
  PushResult r;
  r.applied = it != pending_.end() && it->second.taken;
  if (!r.applied) r.message = "the coordinator's step did not take this slice";
  if (it != pending_.end()) {
    // Its wait for the step's other slices, not this worker's link. The step's own time and
    // the coordinator's command after the last slice are not counted: every worker's reply
    // waits for those alike, and the coordinator's hold (its round's close) has neither.
    const Pending& p = it->second;
    r.held_seconds = std::max(0.0, absl::ToDoubleSeconds((r.applied ? p.complete : options_.clock->Now()) - p.arrived));
  }
  r.version = store_->version();
  return r;
}

void ShardCore::AddOnArrival(const PushInfo& info, const std::vector<float>& gradient) {
  if (!sync_ || info.version != store_->version()) return;
  const int64_t elements = store_->layout().total_elements();
  if (!arrival_.Reserve(info.id, info.version, static_cast<double>(info.batch), elements)) return;
  // The model-sized loop without the lock: other pushes, pulls and the step's wait go on
  // (the step waits for it: arrival_.idle()). `gradient` is still this call's own.
  mu_.Unlock();
  arrival_.Add(info.id, gradient, static_cast<double>(info.batch));
  mu_.Lock();
  arrival_.Done();
}

absl::StatusOr<ModelSnapshot> ShardCore::Pull(WorkerId id, uint64_t have_version, uint64_t min_version,
                                              absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  if (sessions_.count(id) == 0) {
    return absl::NotFoundError(absl::StrCat("worker ", id, " has no session on this shard: join the coordinator"));
  }
  // Until the version comes, or the session ends here (the slice went back to a checkpoint,
  // whose version may never reach min_version again, or the worker was dropped).
  auto ready = [this, id, min_version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || sessions_.count(id) == 0 || (store_ != nullptr && store_->version() >= min_version);
  };
  options_.clock->AwaitWithDeadline(mu_, absl::Condition(&ready), deadline);
  if (shutdown_) return absl::UnavailableError("the shard is shutting down");
  if (sessions_.count(id) == 0) return NoSession(id);
  if (store_ == nullptr) return absl::UnavailableError("this shard has no slice yet: retry");
  if (store_->version() < min_version) {
    return absl::DeadlineExceededError(absl::StrFormat("this shard's slice is at version %d, behind the %d asked for",
                                                       store_->version(), min_version));
  }
  ModelSnapshot snap;
  snap.version = store_->version();
  snap.history = store_->history();
  snap.layout = store_->layout();
  if (have_version != snap.version) snap.weights = store_->served();
  return snap;
}

absl::StatusOr<ModelLayout> ShardCore::Layout() const {
  absl::MutexLock lock(&mu_);
  if (store_ == nullptr) return absl::FailedPreconditionError("this shard has no slice yet");
  return store_->layout();
}

void ShardCore::CountPushBytes(int64_t bytes) { push_bytes_.Increment(static_cast<double>(bytes)); }

void ShardCore::CountPullBytes(int64_t bytes) { pull_bytes_.Increment(static_cast<double>(bytes)); }

absl::StatusOr<ShardCore::Taken> ShardCore::TakeMembers(const ReplicatedStep& step) {
  if (store_ == nullptr) return absl::FailedPreconditionError("a step before the slice's first values");
  if (store_->version() != step.version) {
    return absl::AbortedError(  // as CaptureAt's: the job goes back to its common checkpoint
        absl::StrFormat("the coordinator's step from version %d, and this slice is at %d: a step was missed",
                        step.version, store_->version()));
  }
  auto all_here = [this, &step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_) return true;
    for (const ReplicatedStep::Member& m : step.members) {
      if (sessions_.count(m.id) == 0) continue;  // closed here: its slice is not awaited
      if (!SliceHere(m)) return false;
    }
    return true;
  };
  options_.clock->AwaitWithDeadline(mu_, absl::Condition(&all_here), options_.clock->Now() + member_wait_);
  // A slice being added on arrival finishes first (bounded: a memory loop): the step reads
  // or rewrites that sum.
  auto added = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return arrival_.idle(); };
  mu_.Await(absl::Condition(&added));
  if (shutdown_) return absl::UnavailableError("the shard is shutting down");
  if (absl::Status s = OneModel(step); !s.ok()) return s;
  Taken taken;
  for (const ReplicatedStep::Member& m : step.members) {
    taken.all_weight += m.weight;
    if (!SliceHere(m)) {
      // Like a worker late for a round: dropped. Its session ends here, so no later step
      // waits for it and its next call is told to join again.
      slices_left_out_.Increment();
      if (sessions_.erase(m.id) > 0) {
        Log(
            absl::StrFormat("worker %d's slice for version %d did not come in %.0f s: step %d taken without it; "
                            "its session ends here (it joins again)",
                            m.id, m.model_version, absl::ToDoubleSeconds(member_wait_), step.version));
      }
      continue;
    }
    Pending& p = pending_.at(m.id);
    taken.members.push_back(m);
    taken.taken_weight += m.weight;
    taken.last_arrived = std::max(taken.last_arrived, p.arrived);
    taken.slices.emplace_back(std::move(p.gradient), m.weight);
    p.gradient.clear();
  }
  return taken;
}

bool ShardCore::AlreadyTaken(WorkerId id, uint64_t version) const {
  auto it = pending_.find(id);
  return it != pending_.end() && it->second.taken && it->second.version == version;
}

bool ShardCore::SliceHere(const ReplicatedStep::Member& m) const {
  auto it = pending_.find(m.id);
  return it != pending_.end() && it->second.version == m.model_version && !it->second.gradient.empty();
}

absl::Status ShardCore::OneModel(const ReplicatedStep& step) {
  if (!sync_) return absl::OkStatus();
  std::vector<WorkerId> missing;
  for (const ReplicatedStep::Member& m : step.members) {
    if (!SliceHere(m)) missing.push_back(m.id);
  }
  if (missing.empty()) return absl::OkStatus();
  // The coordinator's slice took these members' gradients: a step here without them would
  // make this slice's model another than the others'. Nothing is applied; the job goes
  // back to the common checkpoint, where every slice is one model again.
  slices_left_out_.Increment(static_cast<double>(missing.size()));
  for (WorkerId id : missing) sessions_.erase(id);  // told to join again
  return absl::AbortedError(absl::StrFormat(
      "sync step %d: the slices of worker(s) %s did not come in %.0f s, and every slice must take the same members: "
      "not taken here; the job goes back to its common checkpoint",
      step.version, absl::StrJoin(missing, ", "), absl::ToDoubleSeconds(member_wait_)));
}

void ShardCore::MarkTaken(const ReplicatedStep& step, absl::Time complete) {
  for (auto& [id, p] : pending_) {
    for (const ReplicatedStep::Member& m : step.members) {
      if (m.id == id && m.model_version == p.version) {
        p.taken = true;
        p.complete = complete;
      }
    }
    // Sync: a slice of this version or older the round did not take never will be.
    if (sync_ && !p.taken && p.version <= step.version) p.released = true;
  }
}

void ShardCore::SetNormReduction(NormReduction reduction) {
  absl::MutexLock lock(&mu_);
  norm_reduction_ = std::move(reduction);
}

absl::StatusOr<std::optional<double>> ShardCore::NormToClipBy(uint64_t version, const std::vector<float>& sum,
                                                              double scale) {
  NormReduction reduce;
  const ParameterStore* store = nullptr;  // replaced only on this (the control stream's) thread
  {
    absl::MutexLock lock(&mu_);
    reduce = norm_reduction_;
    store = store_.get();
  }
  if (store->options().clip_grad_norm <= 0) return std::nullopt;
  if (!reduce) return absl::FailedPreconditionError("a clipped step, and no way to the coordinator's norm");
  // Outside the lock: pushes and pulls go on while the other slices' parts come.
  absl::StatusOr<double> total = reduce(version, UpdateSumSquares(store->layout(), sum, scale));
  if (!total.ok()) {
    // The slice cannot take this step as the others do: it registers again, and the job goes
    // back to the servers' common checkpoint (a recovery, as for a shard that returns).
    return absl::AbortedError(
        absl::StrCat("the step leaving version ", version, " has no global norm: ", total.status().message()));
  }
  return std::optional<double>(*total);
}

absl::Status ShardCore::Step(const ReplicatedStep& step) {
  {
    absl::MutexLock lock(&mu_);
    AwaitNoStep();
    if (ahead_.has_value() && ahead_->version == step.version) ahead_.reset();  // the command came first
    if (taken_ahead_.has_value() && taken_ahead_->version == step.version) return ConfirmAhead(step);
    stepping_ = true;
  }
  const absl::Status s = TakeStep(step, /*command=*/true);
  absl::MutexLock lock(&mu_);
  stepping_ = false;
  return s;
}

absl::Status ShardCore::TakeStep(const ReplicatedStep& step, bool command) {
  const absl::Time start = options_.clock->Now();
  absl::StatusOr<Taken> taken;
  const std::vector<float>* arrived = nullptr;  // the sum built as the slices came, when it is the step's
  int64_t elements = 0;
  {
    absl::MutexLock lock(&mu_);
    taken = TakeMembers(step);
    if (!taken.ok()) return taken.status();
    if (command && !taken->slices.empty()) {
      command_wait_seconds_.Observe(std::max(0.0, absl::ToDoubleSeconds(start - taken->last_arrived)));
    }
    arrived = arrival_.Close(step.version, taken->members);
    if (arrived != nullptr) summed_on_arrival_.Increment();
    elements = store_->layout().total_elements();
  }
  // The weighted sum, outside the lock (pushes and pulls go on); only this thread steps.
  // A member whose slice never came leaves its weight out of the mean (async: a step of
  // rate 0, which keeps the version in step with the coordinator's).
  const double scale =
      taken->taken_weight > 0 ? step.settings.update_scale * taken->all_weight / taken->taken_weight : 0;
  const bool none = taken->slices.empty();
  const std::vector<float> nothing(none ? elements : 0, 0.0f);  // a step without slices: momentum decays alone
  const std::vector<float>& sum = none                 ? nothing
                                  : arrived != nullptr ? *arrived
                                                       : arrival_.SumOf(taken->slices, elements);
  for (auto& slice : taken->slices) buffers_.Return(std::move(slice.first));
  // A clipped job's every step gives its part (0 without slices): the others wait for it.
  absl::StatusOr<std::optional<double>> norm = NormToClipBy(step.version, sum, scale);
  if (!norm.ok()) return norm.status();
  StepSettings settings = step.settings;
  settings.learning_rate = none ? 0.0 : step.settings.learning_rate.value_or(0.0);  // the coordinator's rate
  if (none) settings.group_rates.assign(settings.group_rates.size(), 0.0);
  if (none) settings.buffer_blend = 0;
  settings.update_scale = scale;
  settings.norm_squared = *norm;
  absl::MutexLock lock(&mu_);
  store_->Apply(sum, settings);
  store_->Predict(none ? 0.0 : step.predict_steps);
  store_->set_history(ExtendHistory(store_->history(), step.version, std::move(taken->members)));
  MarkTaken(step, taken->last_arrived);
  version_gauge_.Set(static_cast<double>(store_->version()));
  if (command) step_seconds_.Observe(absl::ToDoubleSeconds(options_.clock->Now() - start));
  return absl::OkStatus();
}

void ShardCore::AwaitNoStep() {
  auto free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !stepping_; };
  mu_.Await(absl::Condition(&free));
}

void ShardCore::ExpectRound(RoundAhead round) {
  absl::MutexLock lock(&mu_);
  if (!sync_ || store_ == nullptr || round.version != store_->version()) return;
  ahead_ = std::move(round);
  MaybeStepAhead();  // every slice may be here already
}

std::optional<ReplicatedStep> ShardCore::ReadyAhead() const {
  if (!ahead_.has_value() || store_ == nullptr || ahead_->version != store_->version()) return std::nullopt;
  ReplicatedStep step;
  step.version = ahead_->version;
  for (WorkerId id : ahead_->members) {
    auto it = pending_.find(id);
    if (sessions_.count(id) == 0 || it == pending_.end() || it->second.version != step.version ||
        it->second.gradient.empty()) {
      return std::nullopt;
    }
    step.members.push_back({id, step.version, ahead_->weigh_by_batch ? it->second.batch : 1.0});
  }
  if (step.members.empty()) return std::nullopt;
  step.settings.update_scale = MeanScale(step.members);  // the coordinator's sync step (CompleteRound)
  step.settings.learning_rate = ahead_->learning_rate;
  return step;
}

void ShardCore::MaybeStepAhead() {
  if (stepping_ || shutdown_) return;
  std::optional<ReplicatedStep> step = ReadyAhead();
  if (!step.has_value()) return;
  ahead_.reset();
  stepping_ = true;
  taken_ahead_ = step;
  // A checkpoint of this version may still be asked for (the coordinator's capture may
  // precede its command): kept, shared (the store's next step copies what it writes).
  before_ahead_ = CaptureStore(*store_);
  mu_.Unlock();
  const absl::Status s = TakeStep(*step, /*command=*/false);
  mu_.Lock();
  stepping_ = false;
  if (!s.ok()) {  // nothing taken: the coordinator's command takes the step
    taken_ahead_.reset();
    before_ahead_.reset();
    Log(absl::StrCat("the step from version ", step->version, " was not taken ahead: ", s.message()));
    return;
  }
  steps_ahead_.Increment();
}

absl::Status ShardCore::ConfirmAhead(const ReplicatedStep& step) {
  const ReplicatedStep taken = *std::move(taken_ahead_);
  taken_ahead_.reset();
  before_ahead_.reset();
  if (SameStep(taken, step)) return absl::OkStatus();
  ahead_refused_.Increment();
  auto ids = [](const ReplicatedStep& s) {
    return absl::StrJoin(s.members, ", ", [](std::string* out, const ReplicatedStep::Member& m) {
      absl::StrAppend(out, m.id, " (weight ", m.weight, ")");
    });
  };
  return absl::AbortedError(absl::StrFormat(
      "the coordinator's step from version %d took worker(s) %s at rate %g, and this slice stepped ahead with %s at "
      "rate %g: the job goes back to its common checkpoint",
      step.version, ids(step), step.settings.learning_rate.value_or(0), ids(taken),
      taken.settings.learning_rate.value_or(0)));
}

std::string ShardCore::StepWaitSummary() const {
  const metrics::Histogram::Data waits = command_wait_seconds_.Collect();
  const double ahead = steps_ahead_.Value();
  const std::string taken_ahead = ahead > 0 ? absl::StrFormat("; %.0f were taken ahead of it", ahead) : "";
  if (waits.count == 0) return absl::StrCat("no step took a slice at the coordinator's command", taken_ahead);
  return absl::StrCat(
      absl::StrFormat("%d steps took slices, which were in %.1f ms on average before the coordinator's command",
                      waits.count, 1000 * waits.sum / static_cast<double>(waits.count)),
      taken_ahead);
}

}  // namespace server
}  // namespace omnilearn
