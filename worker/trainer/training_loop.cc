#include "worker/trainer/training_loop.h"

#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/training_mode.h"

namespace omnilearn {
namespace worker {
namespace {

using Clock = std::chrono::steady_clock;

bool WarmupOn(const TrainerOptions& o, const TrainingSetup& setup) {
  return o.warmup == Warmup::kOn || (o.warmup == Warmup::kAuto && setup.device.is_cuda());
}

// What tells a streamed push that backward made a parameter's gradient final (nothing
// when the push goes whole).
std::function<void(int)> ReadyFor(StreamedPush* push) {
  if (push == nullptr || !push->streaming()) return nullptr;
  return [push](int tensor) { push->Ready(tensor); };
}

}  // namespace

TrainingLoop::TrainingLoop(const TrainerOptions& o, TrainingSetup* setup, FlatModel* params, StepTiming* timing,
                           Session* session, TrainerMetrics* series, const ProgressReporter* progress,
                           std::vector<float> weights, LocalRound* local)
    : o_(o),
      progress_(progress),
      setup_(setup),
      params_(params),
      timing_(timing),
      session_(session),
      series_(series),
      local_(local),
      weights_(std::move(weights)),
      samples_(o.seed * 7919 + std::hash<std::string>()(o.name), setup->train.size()),
      runner_(WarmupOn(o, *setup), setup, params, timing, series, progress),
      evaluations_(o.eval_every_epochs, setup->train.size(), session->global_samples()) {
  grad_.resize(weights_.size());  // a push's span from before its step
}

absl::StatusOr<TrainerResult> TrainingLoop::Run() {
  if (absl::Status s = Pull(); !s.ok()) return s;
  if (absl::Status s = sample_log_.Open(o_.log_samples); !s.ok()) return s;
  bool finished = false;
  for (int64_t it = 0; o_.max_iterations <= 0 || it < o_.max_iterations;) {
    if (o_.interrupted != nullptr && o_.interrupted->load()) {
      session_->Leave(/*finished=*/false);
      return absl::CancelledError("interrupted: left the job");
    }
    if (session_->idle()) {
      absl::StatusOr<bool> over = Idle();
      if (!over.ok()) return over.status();
      if (!*over) continue;
      finished = !result_.stopped_by_server;
      break;
    }
    const Assignment spans = session_->samples();
    absl::StatusOr<torch::Tensor> idx = samples_.Next(spans, session_->batch());
    if (!idx.ok()) return idx.status();
    const int64_t batch = idx->size(0);
    FollowSchedules();
    // The push opens before backward, whose buckets leave while it runs (when streaming).
    // An emulated or slowed step waits after its real backward: its gradient leaves whole
    // after the wait, or the link would hide behind a wait no real device makes. A round of
    // local steps pushes its pseudo-gradient whole, after its last step.
    std::unique_ptr<StreamedPush> push =
        session_->BeginPushPull(PushFor(batch), grad_, timing_->waits() || local_ != nullptr ? 0 : o_.bucket_bytes);
    const StepResult step = Compute(*idx, batch, push.get());
    PushReply reply;
    bool model_changed = false;  // one round trip: the reply brings the new model
    const auto comm_start = Clock::now();
    absl::StatusOr<PushOutcome> outcome = Exchange(batch, step, std::move(push), &reply, &model_changed);
    const double comm_seconds = std::chrono::duration<double>(Clock::now() - comm_start).count();
    if (!outcome.ok()) return outcome.status();
    if (*outcome == PushOutcome::kStop) {
      progress_->Note("the server stopped the job");
      result_.stopped_by_server = true;
      break;
    }
    if (*outcome == PushOutcome::kRejoined) {  // a new session: this gradient is of the old model
      if (absl::Status s = Pull(); !s.ok()) return s;
      last_comm_seconds_ = 0;
      continue;
    }
    ++it;
    Record(it, batch, step, spans, reply, model_changed, comm_seconds);
    const double global = static_cast<double>(reply.global_samples);
    finished = TrainingDone(reply.global_samples, o_.epochs, setup_->train.size(), it, o_.max_iterations);
    if (o_.evaluate && evaluations_.Due(global, finished)) EvaluateAt(global);
    if (finished) {
      if (absl::Status s = ReportFinalAccuracy(step.loss); !s.ok()) return s;
      break;
    }
  }
  return Finish(finished);
}

// What iteration `it` (1 first) leaves behind once its reply came: the samples it trained
// logged, the new model loaded, the result, the progress line and the series.
void TrainingLoop::Record(int64_t it, int64_t batch, const StepResult& step, const Assignment& spans,
                          const PushReply& reply, bool model_changed, double comm_seconds) {
  last_comm_seconds_ = comm_seconds;
  if (reply.applied) sample_log_.Applied(spans);
  pending_accuracy_.reset();
  result_.iterations = it;
  result_.last_loss = step.loss;
  progress_->Iteration(it - 1, batch, step.loss, step.compute_seconds, reply.model_version);
  if (model_changed || local_ != nullptr) params_->Load(weights_);  // a round starts from the server's model
  series_->Iteration(batch, step.compute_seconds, comm_seconds, step.loss, step.out_of_memory);
  series_->Rejoins(static_cast<uint64_t>(session_->rejoins()));
}

StepResult TrainingLoop::Compute(const torch::Tensor& idx, int64_t batch, StreamedPush* push) {
  if (local_ == nullptr) return runner_.Run(idx, batch, &grad_, ReadyFor(push));
  const int64_t steps = LocalRoundSteps(batch, session_->local_steps(), session_->local_batch());
  return local_->Run(idx, steps, &runner_, params_, &grad_);
}

absl::Status TrainingLoop::Pull() {
  absl::StatusOr<bool> changed = session_->Pull(absl::MakeSpan(weights_));
  if (!changed.ok()) return changed.status();
  if (*changed || local_ != nullptr) params_->Load(weights_);
  return absl::OkStatus();
}

// This worker holds no samples (the job's are all handed out): one wait with the
// server, which may hand it samples a lost worker left. True when the loop ends: the
// job's count was reached (the last evaluation reported) or the server stopped it.
absl::StatusOr<bool> TrainingLoop::Idle() {
  PushReply reply;
  bool changed = false;
  absl::StatusOr<PushOutcome> outcome = session_->Idle(absl::MakeSpan(weights_), &reply, &changed);
  if (!outcome.ok()) return outcome.status();
  if (*outcome == PushOutcome::kStop) {
    progress_->Note("the server stopped the job");
    result_.stopped_by_server = true;
    return true;
  }
  if (*outcome == PushOutcome::kRejoined) {
    if (absl::Status s = Pull(); !s.ok()) return s;
    return false;
  }
  if (changed) params_->Load(weights_);
  const double global = static_cast<double>(reply.global_samples);
  if (!TrainingDone(reply.global_samples, o_.epochs, setup_->train.size(), result_.iterations, o_.max_iterations)) {
    return false;
  }
  if (o_.evaluate && evaluations_.Due(global, true)) EvaluateAt(global);
  if (absl::Status s = ReportFinalAccuracy(result_.last_loss); !s.ok()) return s;
  return true;
}

// Schedules follow the global epoch the server reports (the same for every worker).
void TrainingLoop::FollowSchedules() {
  const std::string change = timing_->Follow(static_cast<double>(session_->global_samples()) / setup_->train.size());
  if (!change.empty()) progress_->Note(change);
}

// The step's push ended (its time, loss and any accuracy in the trailer) and the new
// model received; or, out of memory, the push given up and the report sent instead.
absl::StatusOr<PushOutcome> TrainingLoop::Exchange(int64_t batch, const StepResult& step,
                                                   std::unique_ptr<StreamedPush> push, PushReply* reply,
                                                   bool* changed) {
  if (step.out_of_memory) {
    push.reset();  // cancelled: the server changes nothing
    StepReport report = PushFor(batch);
    report.out_of_memory = true;
    report.end.test_accuracy = pending_accuracy_;
    return session_->PushPull(report, grad_, absl::MakeSpan(weights_), reply, changed);
  }
  StepEnd end{step.compute_seconds, step.loss, pending_accuracy_};
  end.emulation_overruns = timing_->overruns();  // this step's overrun counted (the header's is older)
  return session_->FinishPushPull(std::move(push), end, absl::MakeSpan(weights_), reply, changed);
}

// The step as known before it runs (its time and loss follow it).
StepReport TrainingLoop::PushFor(int64_t batch) const {
  StepReport step;
  step.batch_size = batch;
  step.communication_seconds = last_comm_seconds_;  // the previous iteration's
  step.emulation_overruns = timing_->overruns();
  return step;
}

void TrainingLoop::EvaluateAt(double global) {
  result_.test_accuracy = Evaluate(setup_->model.get(), setup_->test, setup_->device);
  series_->Accuracy(result_.test_accuracy);
  progress_->Evaluation(global / setup_->train.size(), o_.eval_every_epochs, result_.test_accuracy,
                        session_->model_version());
  pending_accuracy_ = result_.test_accuracy;
}

// The last measurement goes to the server alone, on the model it was measured on: the
// final model, the summary and an export then agree.
absl::Status TrainingLoop::ReportFinalAccuracy(double loss) {
  if (!pending_accuracy_) return absl::OkStatus();
  StepReport report;
  report.report_only = true;
  report.end.test_accuracy = pending_accuracy_;
  report.end.train_loss = loss;
  PushReply reply;
  return session_->Push(report, {}, weights_, &reply).status();
}

absl::StatusOr<TrainerResult> TrainingLoop::Finish(bool finished) {
  if (!o_.save_model.empty()) {
    if (absl::Status s = setup_->model->Save(o_.save_model); !s.ok()) return s;
    progress_->Note(absl::StrCat("saved the trained TorchScript module to ", o_.save_model));
  }
  session_->Leave(finished);
  result_.pushes_sent = session_->pushes_sent();
  result_.pushes_answered = session_->pushes_answered();
  return result_;
}

}  // namespace worker
}  // namespace omnilearn
