#include "worker/trainer/trainer.h"

#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/safetensors.h"
#include "worker/client/session.h"
#include "worker/devices/device.h"
#include "worker/trainer/dataset.h"
#include "worker/trainer/flat_model.h"
#include "worker/trainer/model.h"
#include "worker/trainer/progress_reporter.h"
#include "worker/trainer/step_runner.h"
#include "worker/trainer/step_timing.h"
#include "worker/trainer/trainer_metrics.h"
#include "worker/trainer/training_loop.h"

namespace omnilearn {
namespace worker {
namespace {

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

absl::StatusOr<TrainingSetup> Prepare(const TrainerOptions& o, const ProgressReporter& progress) {
  TrainingSetup s;
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

// The trainable tensors' names, in layout order (the optimizer's param groups name them).
std::vector<std::string> ParameterNames(const ModelLayout& layout) {
  std::vector<std::string> names;
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) {
    if (!layout.is_buffer(t)) names.push_back(layout.tensors()[t].name);
  }
  return names;
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

// The rounds of the job's local steps, on the worker's own optimizer (null without local
// steps). A worker without an optimizer of its own leaves the job, saying what to give.
absl::StatusOr<std::unique_ptr<LocalRound>> LocalRoundFor(const std::optional<OptimizerChoice>& optimizer, Model* model,
                                                          Session* session) {
  if (session->local_steps() <= 1 && session->local_batch() <= 0) return nullptr;
  absl::StatusOr<std::unique_ptr<LocalRound>> local =
      optimizer.has_value()
          ? LocalRound::Create(*optimizer, model)
          : absl::FailedPreconditionError(
                "the job runs local steps (the server's --local_steps or --local_batch): each worker steps its own "
                "optimizer, the inner one; give it with --optimizer (sgd, adam or adamw) and its flags");
  if (!local.ok()) session->Leave(/*finished=*/false);
  return local;
}

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
    absl::StatusOr<TrainingSetup> setup = Prepare(o, progress);
    if (!setup.ok()) return setup.status();
    FlatModel params(setup->model.get());
    absl::StatusOr<ModelLayout> layout = params.Layout();
    if (!layout.ok()) return layout.status();
    absl::StatusOr<std::vector<float>> weights = InitialWeights(o, *layout, &params, progress);
    if (!weights.ok()) return weights.status();
    const bool cuda = setup->device.is_cuda();
    SessionOptions so = SessionOptionsFor(o, cuda, setup->train.size());
    absl::StatusOr<std::optional<OptimizerChoice>> optimizer = OptimizerFromFlags(o.optimizer, ParameterNames(*layout));
    if (!optimizer.ok()) return optimizer.status();
    so.worker.optimizer = *optimizer;
    so.worker.takes_local_steps = true;  // with its own optimizer (LocalRoundFor)
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
    absl::StatusOr<std::unique_ptr<LocalRound>> local = LocalRoundFor(*optimizer, setup->model.get(), &session);
    if (!local.ok()) return local.status();
    TrainingLoop loop(o, &*setup, &params, &*timing, &session, &series, &progress, std::move(*weights), local->get());
    return loop.Run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch: ", ErrorCause(e)));
  }
}

}  // namespace worker
}  // namespace omnilearn
