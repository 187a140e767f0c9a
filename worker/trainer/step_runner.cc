#include "worker/trainer/step_runner.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/devices/device.h"

namespace omnilearn {
namespace worker {

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

StepRunner::StepRunner(bool warmup, TrainingSetup* setup, FlatModel* params, StepTiming* timing, TrainerMetrics* series,
                       const ProgressReporter* progress)
    : progress_(progress), warmup_(warmup), setup_(setup), params_(params), timing_(timing), series_(series) {
  params_->WatchGradients();
}

StepResult StepRunner::Run(const torch::Tensor& idx, int64_t batch, std::vector<float>* grad,
                           const std::function<void(int)>& ready) {
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
    if (ready) {
      params_->OnGradientReady([this, grad, &ready, &copied](int i) {
        params_->CopyOne(i, grad);
        copied[i] = true;
        ready(i);
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

std::pair<torch::Tensor, torch::Tensor> StepRunner::Gather(const torch::Tensor& idx, int64_t batch) {
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

}  // namespace worker
}  // namespace omnilearn
