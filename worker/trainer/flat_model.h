// The model as the worker's push and pull see it: one flat float32 vector in layout order,
// its parameters (a push carries their gradients) and then its buffers (a push carries
// their values), each with the type the model holds it in. The C++ worker's side of the
// rule python/omnilearn/flat_model.py follows for Python workers.
#ifndef OMNILEARN_WORKER_TRAINER_FLAT_MODEL_H_
#define OMNILEARN_WORKER_TRAINER_FLAT_MODEL_H_

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_layout.h"
#include "worker/trainer/model.h"
#include "worker/trainer/torch_dtype.h"

namespace omnilearn {
namespace worker {

// The model as one flat float vector in layout order: its parameters, then its buffers
// (BatchNorm statistics, sent where a parameter sends its gradient). And back.
class FlatModel {
 public:
  explicit FlatModel(Model* model) {
    for (auto& [name, t] : model->Parameters()) Add(name, t, /*buffer=*/false);
    for (auto& [name, t] : model->Buffers()) Add(name, t, /*buffer=*/true);
  }
  absl::StatusOr<ModelLayout> Layout() const { return ModelLayout::Create(specs_); }
  size_t size() const { return tensors_.size(); }

  std::vector<float> Values() const {
    torch::NoGradGuard no_grad;
    std::vector<float> out(tensors_.empty() ? 0 : offsets_.back() + tensors_.back().numel());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      torch::from_blob(out.data() + offsets_[i], tensors_[i].sizes(), torch::kFloat32).copy_(tensors_[i].detach());
    }
    return out;
  }

  // Backward's notice per parameter: `ready(i)` runs once parameter i's gradient is
  // accumulated (a post hook on its grad accumulator, as DDP's reducer does; the model
  // keeps the accumulators alive). Null: no notices.
  void OnGradientReady(std::function<void(int)> ready) { ready_ = std::move(ready); }
  void WatchGradients() {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (specs_[i].buffer || !tensors_[i].requires_grad()) continue;
      AccumulatorPtr acc = torch::autograd::impl::grad_accumulator(tensors_[i]);
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i](const torch::autograd::variable_list& out, const torch::autograd::variable_list&) {
            if (ready_) ready_(static_cast<int>(i));
            return out;
          }));
      accumulators_.push_back(std::move(acc));
    }
  }
  // Tensor i's gradient (a parameter's) or value (a buffer's), copied once straight into
  // its place in the push buffer `out` (already sized to the model; one device-to-host
  // copy on CUDA, no staging tensor).
  void CopyOne(int i, std::vector<float>* out) const {
    torch::NoGradGuard no_grad;
    const torch::Tensor& t = tensors_[i];
    torch::Tensor v = specs_[i].buffer ? t.detach() : (t.grad().defined() ? t.grad() : torch::zeros_like(t));
    torch::from_blob(out->data() + offsets_[i], t.sizes(), torch::kFloat32).copy_(v);
  }

  void Load(const std::vector<float>& flat) {
    torch::NoGradGuard no_grad;
    int64_t off = 0;
    for (torch::Tensor& t : tensors_) {
      torch::Tensor src = torch::from_blob(const_cast<float*>(flat.data()) + off, t.sizes(), torch::kFloat32);
      // Integer buffers (num_batches_tracked) arrive as averages: round, do not truncate.
      t.copy_(t.is_floating_point() ? src : src.round(), /*non_blocking=*/false);
      off += t.numel();
    }
  }

  // Local steps' pseudo-gradient into `out` (sized to the model): a parameter's value in
  // `start` (Values() at the round's start) less its value now; a buffer's value now.
  void Difference(const std::vector<float>& start, std::vector<float>* out) const {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      torch::Tensor dst = torch::from_blob(out->data() + offsets_[i], tensors_[i].sizes(), torch::kFloat32);
      dst.copy_(tensors_[i].detach());
      if (specs_[i].buffer) continue;
      dst.neg_().add_(
          torch::from_blob(const_cast<float*>(start.data()) + offsets_[i], tensors_[i].sizes(), torch::kFloat32));
    }
  }

  void ZeroGrad() {
    for (torch::Tensor& t : tensors_) {
      if (t.grad().defined()) t.mutable_grad() = torch::Tensor();
    }
  }

 private:
  void Add(const std::string& name, const torch::Tensor& t, bool buffer) {
    offsets_.push_back(offsets_.empty() ? 0 : offsets_.back() + tensors_.back().numel());
    specs_.push_back(
        TensorSpec{name, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()), buffer, DtypeName(t.scalar_type())});
    tensors_.push_back(t);
  }

  std::vector<TensorSpec> specs_;
  std::vector<torch::Tensor> tensors_;
  std::vector<int64_t> offsets_;  // per tensor, in the flat vector
  // A std::shared_ptr up to LibTorch 2.x's c10::intrusive_ptr: whichever this LibTorch returns.
  using AccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  std::vector<AccumulatorPtr> accumulators_;
  std::function<void(int)> ready_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_FLAT_MODEL_H_
