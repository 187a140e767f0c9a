#include "worker/trainer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/safetensors.h"
#include "worker/dataset.h"
#include "worker/device.h"
#include "worker/evaluation_schedule.h"
#include "worker/flat_model.h"
#include "worker/model.h"
#include "worker/progress_reporter.h"
#include "worker/samples.h"
#include "worker/session.h"
#include "worker/step_timing.h"
#include "worker/trainer_metrics.h"

namespace omnilearn {
namespace worker {
namespace {

using Clock = std::chrono::steady_clock;

double Evaluate(Model* model, const Dataset& test, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->SetTraining(false);
  int64_t correct = 0;
  for (int64_t i = 0; i < test.size(); i += 1000) {
    const int64_t n = std::min<int64_t>(1000, test.size() - i);
    torch::Tensor x = test.images.narrow(0, i, n).to(device);
    torch::Tensor y = test.labels.narrow(0, i, n).to(device);
    correct += model->Forward(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  model->SetTraining(true);
  return static_cast<double>(correct) / test.size();
}

// Reads the layout's tensors (by name and shape) from a safetensors export or checkpoint.
absl::Status LoadInitialWeights(const std::string& path, const ModelLayout& layout, std::vector<float>* weights) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<std::vector<float>> values = file->Gather(layout);
  if (!values.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_from ", path, " does not fit this model: ", values.status().message()));
  }
  *weights = std::move(*values);
  return absl::OkStatus();
}

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

absl::Status LoadData(const TrainerOptions& o, bool need_train, bool need_test, Dataset* train, Dataset* test) {
  if (o.dataset == "fashion-mnist") {
    const std::string dir = o.data_dir.empty() ? kDefaultFashionMnistDir : o.data_dir;
    for (auto [need, is_train, out] :
         {std::make_tuple(need_train, true, train), std::make_tuple(need_test, false, test)}) {
      if (!need) continue;
      absl::StatusOr<Dataset> d = LoadFashionMnist(dir, is_train);
      if (!d.ok()) return d.status();
      *out = std::move(*d);
    }
    return absl::OkStatus();
  }
  if (o.dataset == "synthetic") {
    if (o.synthetic_samples < 10) return absl::InvalidArgumentError("synthetic_samples must be >= 10");
    *train = MakeSynthetic(o.synthetic_samples, 7);  // same data on every worker: a fixed seed
    *test = MakeSynthetic(std::max<int64_t>(1, o.synthetic_samples / 10), 8);
    return absl::OkStatus();
  }
  if (absl::StartsWith(o.dataset, kTensorsPrefix)) {
    const std::string path = o.dataset.substr(strlen(kTensorsPrefix));
    Dataset file_test;
    if (absl::Status s = LoadTensorFile(path, train, &file_test); !s.ok()) return s;
    if (need_test && !file_test.labels.defined()) {
      return absl::InvalidArgumentError(absl::StrCat("evaluate needs test_x and test_y in ", path));
    }
    *test = std::move(file_test);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dataset '", o.dataset, "' (want fashion-mnist, synthetic or tensors:PATH)"));
}

// The model must take the data's samples and have an output per class: checked on two
// samples before joining, so a mismatch is a clear error instead of a crash mid-job.
absl::Status CheckModelFitsData(Model* model, const Dataset& data, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const int64_t n = std::min<int64_t>(2, data.size());
  const std::string sample_shape = absl::StrJoin(data.images.sizes().slice(1), ",");
  torch::Tensor out;
  try {
    model->SetTraining(false);
    out = model->Forward(data.images.narrow(0, 0, n).to(device));
    model->SetTraining(true);
  } catch (const std::exception& e) {
    model->SetTraining(true);
    const std::string what = ErrorCause(e);
    return absl::InvalidArgumentError(absl::StrCat("the model does not take this data's samples of shape [",
                                                   sample_shape, "] (a batch of them is [B,", sample_shape,
                                                   "]): ", what));
  }
  const int64_t classes = data.labels.max().item<int64_t>() + 1;
  if (out.dim() != 2 || out.size(0) != n || out.size(1) < classes) {
    return absl::InvalidArgumentError(absl::StrCat("the model maps [B,", sample_shape, "] to [",
                                                   absl::StrJoin(out.sizes(), ","),
                                                   "]; the data needs [B,C] logits "
                                                   "with C >= ",
                                                   classes, " (its labels go up to ", classes - 1, ")"));
  }
  return absl::OkStatus();
}

// The model (built-in or --model_file) in training mode on `device`; callers load --init_from.
absl::StatusOr<std::unique_ptr<Model>> BuildModel(const TrainerOptions& o, const torch::Device& device) {
  absl::StatusOr<std::unique_ptr<Model>> made =
      o.model_file.empty() ? MakeModel(o.model, o.seed) : LoadScriptedModel(o.model_file);
  if (!made.ok()) return made.status();
  std::unique_ptr<Model> model = std::move(*made);
  model->To(device);
  model->SetTraining(true);
  return model;
}

// ---------------------------------------------------------------- Train's parts

// Options Train refuses before touching LibTorch.
absl::Status CheckTrainOptions(const TrainerOptions& o) {
  if (o.threads < 1) return absl::InvalidArgumentError("threads must be >= 1");
  if (!(o.epochs > 0) && o.max_iterations <= 0) {
    return absl::InvalidArgumentError("give epochs > 0 or max_iterations > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<StepTiming> TimingFor(const TrainerOptions& o) {
  StepTimingOptions to;
  to.slowdown = o.slowdown;
  to.slowdown_schedule = o.slowdown_schedule;
  to.emulate_device = o.emulate_device;
  to.seed = o.seed * 1000003 + std::hash<std::string>()(o.name);
  return StepTiming::Create(to, omnilearn::Clock::Real());
}

// What a run trains with, set up before it joins: the device, the data and the model.
struct Setup {
  torch::Device device{torch::kCPU};
  Dataset train, test;
  std::unique_ptr<Model> model;
};

absl::StatusOr<Setup> Prepare(const TrainerOptions& o, const ProgressReporter& progress) {
  Setup s;
  std::string note;
  absl::StatusOr<torch::Device> device = PickDevice(o.device, ProbeCuda(), &note);
  if (!device.ok()) return device.status();
  if (!note.empty()) progress.Note(note);
  s.device = *device;
  if (absl::Status st = LoadData(o, /*need_train=*/true, o.evaluate, &s.train, &s.test); !st.ok()) return st;
  absl::StatusOr<std::unique_ptr<Model>> made = BuildModel(o, s.device);
  if (!made.ok()) return made.status();
  s.model = std::move(*made);
  if (absl::Status st = CheckModelFitsData(s.model.get(), s.train, s.device); !st.ok()) return st;
  return s;
}

// The model's values to join with: its own, or --init_from's (loaded into it too).
absl::StatusOr<std::vector<float>> InitialWeights(const TrainerOptions& o, const ModelLayout& layout, FlatModel* params,
                                                  const ProgressReporter& progress) {
  std::vector<float> weights = params->Values();
  if (o.init_from.empty()) return weights;
  if (absl::Status s = LoadInitialWeights(o.init_from, layout, &weights); !s.ok()) return s;
  params->Load(weights);
  progress.Note(absl::StrCat("initial weights from ", o.init_from));
  return weights;
}

SessionOptions SessionOptionsFor(const TrainerOptions& o, bool cuda, int64_t dataset_size) {
  SessionOptions so;
  so.worker.name = o.name;
  so.worker.host = o.host.empty() ? Hostname() : o.host;
  so.worker.device = cuda ? DeviceKind::kCuda : DeviceKind::kCpu;
  so.worker.max_batch_size = o.max_batch;
  so.worker.dataset_size = static_cast<uint64_t>(dataset_size);          // the server assigns the samples
  so.worker.job_samples = JobSamples(o.epochs, so.worker.dataset_size);  // and ends the job on its count
  so.reconnect_timeout = o.reconnect_timeout;
  so.connect_timeout = o.connect_timeout;
  so.server_hint = o.server_hint;
  so.jitter_seed = o.seed * 1000003 + std::hash<std::string>()(o.name);
  so.interrupted = o.interrupted;
  return so;
}

// Joins, saying so. False when the server said stop (it is shutting down, or its job is
// finished): nothing to train.
absl::StatusOr<bool> JoinJob(bool cuda, const std::vector<float>& weights, Session* session,
                             const ProgressReporter& progress) {
  progress.Note("joining the server (the first round waits until the server's --num_workers have joined)");
  if (absl::Status s = session->Join(weights); !s.ok()) return s;
  if (session->stop_requested()) {
    progress.Note("the server said stop: nothing to train");
    return false;
  }
  progress.Note(absl::StrFormat("joined as worker %d: device=%s batch=%d mode=%s samples so far=%d%s",
                                session->worker_id(), cuda ? "cuda" : "cpu", session->batch(),
                                ModeName(session->mode()), session->global_samples(),
                                session->samples().empty() ? " (own data order: the server assigns none)" : ""));
  return true;
}

struct StepResult {
  double compute_seconds = 0;
  double loss = 0;
  bool out_of_memory = false;
};

// One step's compute: the batch gathered onto the device (on a GPU straight into reused
// pinned buffers, copied asynchronously: one host copy, covered by the wait before the
// timed step), an untimed warm-up at each new batch size when asked (the first steps of a
// shape on a GPU would show the controller times that are not the worker's), then the
// timed forward + loss + backward, its gradient into the push buffer. Running out of
// device memory is a result, not an error.
class StepRunner {
 public:
  StepRunner(const TrainerOptions& o, Setup* setup, FlatModel* params, StepTiming* timing, TrainerMetrics* series,
             const ProgressReporter* progress)
      : progress_(progress),
        warmup_(o.warmup == Warmup::kOn || (o.warmup == Warmup::kAuto && setup->device.is_cuda())),
        setup_(setup),
        params_(params),
        timing_(timing),
        series_(series) {
    params_->WatchGradients();
  }

  // `push` (may be null) is told each parameter as backward makes its gradient final, its
  // values already in `grad` (sized to the model): buckets leave while backward goes on.
  StepResult Run(const torch::Tensor& idx, int64_t batch, std::vector<float>* grad, StreamedPush* push) {
    StepResult r;
    try {
      auto [x, y] = Gather(idx, batch);
      Model* model = setup_->model.get();
      if (warmup_ && batch != warm_batch_) {
        torch::nn::functional::cross_entropy(model->Forward(x), y).backward();
        warm_batch_ = batch;
        progress_->Note(absl::StrCat("untimed warm-up step at batch ", batch));
      }
      params_->ZeroGrad();
      Synchronize(setup_->device);
      std::vector<bool> copied(params_->size(), false);
      if (push != nullptr && push->streaming()) {
        params_->OnGradientReady([this, grad, push, &copied](int i) {
          params_->CopyOne(i, grad);
          copied[i] = true;
          push->Ready(i);
        });
      }
      timing_->Start();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->Forward(x), y);
      loss.backward();
      params_->OnGradientReady(nullptr);
      Synchronize(setup_->device);
      r.compute_seconds = timing_->Finish(batch);
      if (std::optional<std::string> warning = timing_->TakeOverrunWarning()) {
        progress_->Note(absl::StrCat("warning: ", *warning));
      }
      series_->EmulationOverruns(timing_->overruns());
      r.loss = loss.item<double>();
      for (size_t i = 0; i < copied.size(); ++i) {  // buffers, and what backward did not reach
        if (!copied[i]) params_->CopyOne(static_cast<int>(i), grad);
      }
    } catch (const std::exception& e) {  // TorchScript rethrows CUDA errors as runtime_error
      params_->OnGradientReady(nullptr);
      if (!IsOutOfMemory(e)) throw;
      progress_->Note(absl::StrCat("out of memory at batch ", batch, ": reporting it"));
      params_->ZeroGrad();
      return StepResult{0, 0, /*out_of_memory=*/true};
    }
    return r;
  }

 private:
  std::pair<torch::Tensor, torch::Tensor> Gather(const torch::Tensor& idx, int64_t batch) {
    const Dataset& train = setup_->train;
    if (!setup_->device.is_cuda()) return {train.images.index_select(0, idx), train.labels.index_select(0, idx)};
    if (!stage_x_.defined() || stage_x_.size(0) < batch) {
      std::vector<int64_t> shape(train.images.sizes().begin(), train.images.sizes().end());
      shape[0] = batch;
      stage_x_ = torch::empty(shape, train.images.options().pinned_memory(true));
      stage_y_ = torch::empty({batch}, train.labels.options().pinned_memory(true));
    }
    Synchronize(setup_->device);  // the previous batch's copy out of the buffers is done
    torch::Tensor hx = stage_x_.narrow(0, 0, batch), hy = stage_y_.narrow(0, 0, batch);
    torch::index_select_out(hx, train.images, 0, idx);
    torch::index_select_out(hy, train.labels, 0, idx);
    return {hx.to(setup_->device, /*non_blocking=*/true), hy.to(setup_->device, /*non_blocking=*/true)};
  }

  const ProgressReporter* const progress_;
  const bool warmup_;
  Setup* const setup_;
  FlatModel* const params_;
  StepTiming* const timing_;
  TrainerMetrics* const series_;
  int64_t warm_batch_ = -1;
  torch::Tensor stage_x_, stage_y_;
};

// The loop after the join: the facade that holds the order of a step (samples, compute,
// push and pull, evaluation) while the parts above hold the rules.
class TrainingLoop {
 public:
  TrainingLoop(const TrainerOptions& o, Setup* setup, FlatModel* params, StepTiming* timing, Session* session,
               TrainerMetrics* series, const ProgressReporter* progress, std::vector<float> weights)
      : o_(o),
        progress_(progress),
        setup_(setup),
        params_(params),
        timing_(timing),
        session_(session),
        series_(series),
        weights_(std::move(weights)),
        samples_(o.seed * 7919 + std::hash<std::string>()(o.name), setup->train.size()),
        runner_(o, setup, params, timing, series, progress),
        evaluations_(o.eval_every_epochs, setup->train.size(), session->global_samples()) {
    grad_.resize(weights_.size());  // a push's span from before its step
  }

  absl::StatusOr<TrainerResult> Run() {
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
      // after the wait, or the link would hide behind a wait no real device makes.
      std::unique_ptr<StreamedPush> push =
          session_->BeginPushPull(PushFor(batch), grad_, timing_->waits() ? 0 : o_.bucket_bytes);
      const StepResult step = runner_.Run(*idx, batch, &grad_, push.get());
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
      finished = (o_.epochs > 0 && global >= o_.epochs * setup_->train.size()) ||
                 (o_.max_iterations > 0 && it >= o_.max_iterations);
      if (o_.evaluate && evaluations_.Due(global, finished)) EvaluateAt(global);
      if (finished) {
        if (absl::Status s = ReportFinalAccuracy(step.loss); !s.ok()) return s;
        break;
      }
    }
    return Finish(finished);
  }

 private:
  // What iteration `it` (1 first) leaves behind once its reply came: the samples it trained
  // logged, the new model loaded, the result, the progress line and the series.
  void Record(int64_t it, int64_t batch, const StepResult& step, const Assignment& spans, const PushReply& reply,
              bool model_changed, double comm_seconds) {
    last_comm_seconds_ = comm_seconds;
    if (reply.applied) sample_log_.Applied(spans);
    pending_accuracy_.reset();
    result_.iterations = it;
    result_.last_loss = step.loss;
    progress_->Iteration(it - 1, batch, step.loss, step.compute_seconds, reply.model_version);
    if (model_changed) params_->Load(weights_);
    series_->Iteration(batch, step.compute_seconds, comm_seconds, step.loss, step.out_of_memory);
    series_->Rejoins(static_cast<uint64_t>(session_->rejoins()));
  }

  absl::Status Pull() {
    absl::StatusOr<bool> changed = session_->Pull(absl::MakeSpan(weights_));
    if (!changed.ok()) return changed.status();
    if (*changed) params_->Load(weights_);
    return absl::OkStatus();
  }

  // This worker holds no samples (the job's are all handed out): one wait with the
  // server, which may hand it samples a lost worker left. True when the loop ends: the
  // job's count was reached (the last evaluation reported) or the server stopped it.
  absl::StatusOr<bool> Idle() {
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
    if (!(o_.epochs > 0 && global >= o_.epochs * setup_->train.size())) return false;
    if (o_.evaluate && evaluations_.Due(global, true)) EvaluateAt(global);
    if (absl::Status s = ReportFinalAccuracy(result_.last_loss); !s.ok()) return s;
    return true;
  }

  // Schedules follow the global epoch the server reports (the same for every worker).
  void FollowSchedules() {
    const std::string change = timing_->Follow(static_cast<double>(session_->global_samples()) / setup_->train.size());
    if (!change.empty()) progress_->Note(change);
  }

  // The step's push ended (its time, loss and any accuracy in the trailer) and the new
  // model received; or, out of memory, the push given up and the report sent instead.
  absl::StatusOr<PushOutcome> Exchange(int64_t batch, const StepResult& step, std::unique_ptr<StreamedPush> push,
                                       PushReply* reply, bool* changed) {
    if (step.out_of_memory) {
      push.reset();  // cancelled: the server changes nothing
      StepReport report = PushFor(batch);
      report.out_of_memory = true;
      report.end.test_accuracy = pending_accuracy_;
      return session_->PushPull(report, grad_, absl::MakeSpan(weights_), reply, changed);
    }
    const StepEnd end{step.compute_seconds, step.loss, pending_accuracy_};
    return session_->FinishPushPull(std::move(push), end, absl::MakeSpan(weights_), reply, changed);
  }

  // The step as known before it runs (its time and loss follow it).
  StepReport PushFor(int64_t batch) const {
    StepReport step;
    step.batch_size = batch;
    step.communication_seconds = last_comm_seconds_;  // the previous iteration's
    step.emulation_overruns = timing_->overruns();
    return step;
  }

  void EvaluateAt(double global) {
    result_.test_accuracy = Evaluate(setup_->model.get(), setup_->test, setup_->device);
    series_->Accuracy(result_.test_accuracy);
    progress_->Evaluation(global / setup_->train.size(), o_.eval_every_epochs, result_.test_accuracy,
                          session_->model_version());
    pending_accuracy_ = result_.test_accuracy;
  }

  // The last measurement goes to the server alone, on the model it was measured on: the
  // final model, the summary and an export then agree.
  absl::Status ReportFinalAccuracy(double loss) {
    if (!pending_accuracy_) return absl::OkStatus();
    StepReport report;
    report.report_only = true;
    report.end.test_accuracy = pending_accuracy_;
    report.end.train_loss = loss;
    PushReply reply;
    return session_->Push(report, {}, weights_, &reply).status();
  }

  absl::StatusOr<TrainerResult> Finish(bool finished) {
    if (!o_.save_model.empty()) {
      if (absl::Status s = setup_->model->Save(o_.save_model); !s.ok()) return s;
      progress_->Note(absl::StrCat("saved the trained TorchScript module to ", o_.save_model));
    }
    session_->Leave(finished);
    result_.pushes_sent = session_->pushes_sent();
    result_.pushes_answered = session_->pushes_answered();
    return result_;
  }

  const TrainerOptions& o_;
  const ProgressReporter* const progress_;
  Setup* const setup_;
  FlatModel* const params_;
  StepTiming* const timing_;
  Session* const session_;
  TrainerMetrics* const series_;
  std::vector<float> weights_;
  std::vector<float> grad_;  // the push buffer, reused from step to step
  SampleSource samples_;
  StepRunner runner_;
  EvaluationSchedule evaluations_;
  SampleLog sample_log_;
  double last_comm_seconds_ = 0;  // the last iteration's, from the end of compute to the reply
  std::optional<double> pending_accuracy_;
  TrainerResult result_;
};

}  // namespace

absl::StatusOr<Warmup> ParseWarmup(const std::string& text) {
  if (text == "auto") return Warmup::kAuto;
  if (text == "on") return Warmup::kOn;
  if (text == "off") return Warmup::kOff;
  return absl::InvalidArgumentError(absl::StrCat("warmup '", text, "': want auto, on or off"));
}

absl::StatusOr<double> EvaluateOnly(const TrainerOptions& o) {
  if (o.init_from.empty()) return absl::InvalidArgumentError("evaluate_only needs init_from");
  try {
    torch::set_num_threads(o.threads);
    std::string note;
    absl::StatusOr<torch::Device> device = PickDevice(o.device, ProbeCuda(), &note);
    if (!device.ok()) return device.status();
    Dataset train, test;
    if (absl::Status s = LoadData(o, /*need_train=*/false, /*need_test=*/true, &train, &test); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<Model>> model = BuildModel(o, *device);
    if (!model.ok()) return model.status();
    if (absl::Status s = CheckModelFitsData(model->get(), test, *device); !s.ok()) return s;
    FlatModel params(model->get());
    absl::StatusOr<ModelLayout> layout = params.Layout();
    if (!layout.ok()) return layout.status();
    std::vector<float> weights;
    if (absl::Status s = LoadInitialWeights(o.init_from, *layout, &weights); !s.ok()) return s;
    params.Load(weights);
    return Evaluate(model->get(), test, *device);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", ErrorCause(e)));
  }
}

absl::StatusOr<TrainerResult> Train(const TrainerOptions& o, PsClient& client) {
  absl::StatusOr<StepTiming> timing = TimingFor(o);
  if (!timing.ok()) return timing.status();
  if (absl::Status s = CheckTrainOptions(o); !s.ok()) return s;
  try {
    torch::set_num_threads(o.threads);
    const ProgressReporter progress(o.name, o.log_every, o.log);
    absl::StatusOr<Setup> setup = Prepare(o, progress);
    if (!setup.ok()) return setup.status();
    FlatModel params(setup->model.get());
    absl::StatusOr<ModelLayout> layout = params.Layout();
    if (!layout.ok()) return layout.status();
    absl::StatusOr<std::vector<float>> weights = InitialWeights(o, *layout, &params, progress);
    if (!weights.ok()) return weights.status();
    const bool cuda = setup->device.is_cuda();
    SessionOptions so = SessionOptionsFor(o, cuda, setup->train.size());
    so.log = [&progress](const std::string& line) { progress.Note(line); };
    Session session(&client, *layout, std::move(so));
    TrainerMetrics series(o.registry, o.name);  // from the start: its counters show 0 at the start barrier
    absl::StatusOr<bool> joined = JoinJob(cuda, *weights, &session, progress);
    if (!joined.ok()) return joined.status();
    if (!*joined) {
      TrainerResult stopped;
      stopped.stopped_by_server = true;
      return stopped;
    }
    TrainingLoop loop(o, &*setup, &params, &*timing, &session, &series, &progress, std::move(*weights));
    return loop.Run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", ErrorCause(e)));
  }
}

}  // namespace worker
}  // namespace omnilearn
