// The model weights (parameters and buffers) and the optimizer: any of
// data/optimizer_rules.h's (torch.optim's SGD, Adam, AdamW, Adadelta, Adagrad, Adamax,
// NAdam, RAdam, RMSprop, Rprop, ASGD, Adafactor) with param groups of their own
// hyperparameters, a learning-rate schedule (warm-up, then constant, step or cosine) and
// optional global gradient-norm clipping.
#ifndef OMNILEARN_SERVER_DATA_PARAMETER_STORE_H_
#define OMNILEARN_SERVER_DATA_PARAMETER_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_layout.h"
#include "server/data/optimizer_rules.h"
#include "server/data/optimizer_steps.h"
#include "server/data/shared_buffers.h"
#include "server/data/step_settings.h"

namespace omnilearn {
namespace server {

enum class LrSchedule { kConstant, kStep, kCosine };

absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view name);

// A sharded job's coordinator: the whole update's squared norm from its slice's part,
// reduced with the other slices' parts of the step that leaves `version`.
using NormReduction = std::function<double(uint64_t version, double sum_squares)>;

// A param group (torch.optim's param_groups): tensors of the layout, by index, stepping at
// their own rate and weight decay, and with their own values of any other hyperparameter
// (`hyper`, over the job's).
struct ParamGroup {
  std::vector<int> tensors;
  double lr = 0;
  double weight_decay = 0;
  HyperMap hyper;
  // The tensors by the whole model's names, as the worker's optimizer gave them (a sharded
  // job's shards find their pieces by them: ResolveGroupNames); empty: by index alone.
  std::vector<std::string> names;
  bool operator==(const ParamGroup& o) const {
    return tensors == o.tensors && names == o.names && lr == o.lr && weight_decay == o.weight_decay && hyper == o.hyper;
  }
};

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  double learning_rate = 0.05;  // for one step on a gradient averaged over the global batch
  double momentum = 0;          // sgd, rmsprop (torch.optim.SGD's default)
  double weight_decay = 0;      // L2 added to the gradient; adamw (and decoupled_weight_decay): decoupled
  double beta1 = 0.9;           // the Adam family
  double beta2 = 0.999;
  double eps = 1e-8;  // < 0: the rule's own default (torch.optim's)
  // The rule's other hyperparameters by torch.optim's names (nesterov, amsgrad, rho, ...;
  // optimizer_rules.h), over its defaults and the fields above.
  HyperMap hyper;
  // The rate at step t (t = the model version before the step):
  //   t < warmup_steps: learning_rate * (t + 1) / warmup_steps;
  //   then, with s = t - warmup_steps:
  //   kConstant: learning_rate
  //   kStep:     learning_rate * lr_decay ^ floor(s / lr_decay_steps), or with
  //              lr_decay_epochs: learning_rate * lr_decay ^ floor(epoch / lr_decay_epochs)
  //              (epoch: samples trained / the data set's size, as SetEpoch last said)
  //   kCosine:   lr_min + (learning_rate - lr_min) * (1 + cos(pi * min(s, cosine_steps) / cosine_steps)) / 2
  LrSchedule schedule = LrSchedule::kConstant;
  uint64_t warmup_steps = 0;
  uint64_t lr_decay_steps = 0;
  double lr_decay_epochs = 0;  // the step schedule in epochs instead of versions
  double lr_decay = 0.1;
  uint64_t cosine_steps = 0;
  double lr_min = 0;
  // Scales the parameters' gradient down to this global L2 norm when it is larger
  // (0 = off), as torch.nn.utils.clip_grad_norm_ does.
  double clip_grad_norm = 0;
  // With clip_grad_norm, a store that holds one slice of a sharded model (the
  // coordinator's slice 0): the norm it clips by is the whole model's. Null: the store
  // holds the whole model.
  NormReduction norm_reduction;
  // Empty: one group of every parameter at learning_rate and weight_decay. Else every
  // parameter tensor in exactly one group (checked by Initialize); group g steps at
  // groups[g].lr times the schedule's factor (the scheduled rate / learning_rate).
  std::vector<ParamGroup> groups;
};

// InvalidArgument naming the option out of range.
absl::Status ValidateOptimizerOptions(const OptimizerOptions& o);

// Sets each group's tensors (indices into `layout`) from its names. `pieces`: `layout` is a
// sharded model's slice (ShardMap::slice_layout), its tensors named "tensor@begin": a piece
// goes in the group of its tensor, and a name no piece here has is another slice's. Else
// InvalidArgument for a name the layout does not hold.
absl::Status ResolveGroupNames(const ModelLayout& layout, bool pieces, std::vector<ParamGroup>* groups);

// The job's hyperparameters as a map (the typed fields the rule reads, then `hyper`).
HyperMap JobHyper(const OptimizerOptions& o);
// Two optimizers that run the same steps (kind, rates, decays, every hyperparameter, groups).
bool SameSteps(const OptimizerOptions& a, const OptimizerOptions& b);

// The optimizer as the server will run it, in torch.optim's words, e.g.
// "SGD(lr=0.05, momentum=0.9, weight_decay=0.0001), clip_grad_norm=0, schedule=constant":
// every hyperparameter that applies to its kind, so that a start line says what runs.
std::string DescribeOptimizer(const OptimizerOptions& o);

// Global-norm clipping's squared norm, the same for a whole model and for a sharded job's
// slices (whose parts are summed): the squared L2 norm of `update` times `scale` over the
// layout's parameters (buffers carry values, not gradients).
double UpdateSumSquares(const ModelLayout& layout, const std::vector<float>& update, double scale);

// The optimizer's state buffers by name (StateNames, torch.optim's), each the model's size:
// "momentum" (sgd), "exp_avg" and "exp_avg_sq" (adam, adamw), ... Immutable once handed out.
// Adafactor keeps its row and column statistics at the start of each tensor's range.
using OptimizerBuffers = std::vector<std::pair<std::string, std::shared_ptr<const std::vector<float>>>>;
// The optimizer's per-group scalars by name (OptimizerRule::scalars): NAdam's mu_product,
// ASGD's eta.
using OptimizerScalars = std::map<std::string, std::vector<double>>;

// Thread-compatible: the server core serializes access. Snapshots returned by
// weights() are immutable and may be read from any thread.
class ParameterStore {
 public:
  // Options ValidateOptimizerOptions refuses: Initialize returns its error.
  explicit ParameterStore(const OptimizerOptions& options);

  // Sets the model. FailedPrecondition if already set; InvalidArgument on a size
  // mismatch or non-finite values.
  absl::Status Initialize(ModelLayout layout, std::vector<float> values, uint64_t version = 0);
  bool initialized() const { return weights_ != nullptr; }

  // One optimizer step (StepSettings: the rate LearningRate() * lr_scale) on the
  // parameters' slots of `update` (their gradient), and, for buffer tensors, a blend of the
  // current values toward the update's. For SGD a gradient's total displacement is
  // lr * lr_scale * g / (1 - momentum). Bumps the version. `update` must have
  // layout().total_elements() finite values (checked by callers).
  //
  // `sample_share`, the part of a global batch the step stands for: Adam and AdamW follow the square-root
  // scaling rule for adaptive methods (Malladi et al., NeurIPS 2022, "On the SDEs and
  // Scaling Rules for Adaptive Gradient Algorithms"): a step on share f of the batch
  // moves by lr * lr_scale / sqrt(f) (lr_scale carries f itself, as for SGD: so sqrt(f)
  // of a full step), with moments decaying by beta^f, epsilon / sqrt(f), and the bias
  // correction counting shares; the decoupled decay stays lr * lr_scale * wd (linear in
  // the samples). So n pushes of B/n samples follow the trajectory of one global-batch
  // step at the sync rate. SGD ignores it.
  //
  // With clip_grad_norm and no `norm_squared`, the store clips by its own update's norm,
  // through the options' norm_reduction if any.
  void Apply(const std::vector<float>& update, const StepSettings& step = {});

  // Async: the weights workers are given to compute on, when they differ from weights():
  // each parameter stepped ahead by `steps` times the last step's displacement (buffers as
  // they are), so a gradient computed on them was computed near the weights it meets when
  // it lands after the other workers' `steps` pushes (weight prediction, SpecTrain: Chen et
  // al., 2018). After Apply; `steps` <= 0, or no step yet: served() is weights().
  void Predict(double steps);
  // What a pull gets: the prediction when Predict made one, else weights(). Immutable.
  std::shared_ptr<const std::vector<float>> served() const { return served_ != nullptr ? served_ : weights_; }

  // Group 0's rate for the coming step (the job's rate, when it has one group).
  double LearningRate() const { return GroupRate(0); }
  // Group g's: the rates a worker's scheduler set (SetGroupRates), else the group's rate
  // through the options' warm-up and schedule.
  double GroupRate(size_t g) const;
  size_t group_count() const { return options_.groups.empty() ? 1 : options_.groups.size(); }
  // Every group's rate from now on, as a worker's scheduler set it (replacing the options'
  // schedule). InvalidArgument unless one finite rate > 0 per group. In checkpoints
  // (group_rates; Restore).
  absl::Status SetGroupRates(std::vector<double> rates);
  // The rates SetGroupRates set; empty: the options' schedule runs.
  const std::vector<double>& group_rates() const { return worker_rates_; }
  // Group g's hyperparameters, resolved (the rule's defaults, the job's, the group's).
  const HyperValues& Hyper(size_t g) const { return group_hyper_[g]; }
  // Where training stands in epochs (the step schedule in epochs reads it).
  void SetEpoch(double epoch) { epoch_ = epoch; }
  uint64_t version() const { return version_; }
  // Adam's step count in global batches: the sum of the steps' sample shares (= version
  // in sync). Kept in checkpoints (CheckpointState::adam_time).
  double adam_time() const { return adam_time_; }
  // The digest of the steps that brought the model here (ExtendHistory in
  // data/replicated_step.h; 0: not known). Its cores extend it after each step, as they
  // alone know the step's members; kept in checkpoints (CheckpointState::history).
  uint64_t history() const { return history_; }
  void set_history(uint64_t history) { history_ = history; }
  const ModelLayout& layout() const { return layout_; }
  std::shared_ptr<const std::vector<float>> weights() const { return weights_; }
  // Model-sized buffers the steps and predictions had to allocate: snapshots, optimizer
  // state a reader held (OptimizerState), predictions. The others reused one let go.
  uint64_t buffers_allocated() const;
  const OptimizerOptions& options() const { return options_; }
  // The optimizer's state (Adam's step count is the version), shared, not copied: the
  // store's buffers are handed out as they are, and the next Apply writes the state into
  // other buffers while any of these is held (copy on write, range by range inside the
  // step). So a checkpoint copies nothing under the server's lock.
  OptimizerBuffers OptimizerState() const;
  OptimizerScalars ScalarState() const { return scalars_; }
  // Sets the model and the optimizer state from a checkpoint. FailedPrecondition if the
  // model is already set; InvalidArgument on sizes, non-finite values, or buffers or
  // scalars this optimizer does not have (or lacks). `adam_time` < 0 (a checkpoint of an
  // earlier release): the version. `group_rates`: a worker's scheduler's (SetGroupRates),
  // empty: the schedule's.
  absl::Status Restore(ModelLayout layout, std::vector<float> weights, const OptimizerBuffers& state, uint64_t version,
                       double adam_time = -1, const OptimizerScalars& scalars = {},
                       std::vector<double> group_rates = {});

 private:
  std::vector<std::string> StateNames() const { return server::StateNames(options_.kind, group_hyper_); }
  // Each group's hyperparameters (group_hyper_) and the state's roles (role_); InvalidArgument
  // as ValidateOptimizerOptions.
  absl::Status ResolveGroups();
  // The state's starting values (Adagrad's initial accumulator) and scalars.
  void InitializeState();
  // The step's elements (rules that step ranges) or tensors (whole_tensors rules), from the
  // snapshot into `next`, copying held state first (DetachHeldState's `copy_from`).
  void StepAll(const std::vector<StepCoefficients>& ks, const StepSettings& step, const std::vector<float>& update,
               float* next, const std::vector<const float*>& copy_from);
  StatePointers StateAt(int64_t offset) const;
  // The options' rate through warm-up and schedule (group 0's, without a worker's rates).
  double ScheduledRate() const;
  // Each tensor's group (group_of_) from options_.groups; InvalidArgument unless every
  // parameter tensor of the layout is in exactly one group and no buffer is in any.
  absl::Status AssignGroups(const ModelLayout& layout);
  // Muon's groups hold matrices only (but those Keras's AdamW steps, Hp::kAdamW).
  absl::Status CheckMatrices(const ModelLayout& layout) const;
  // The update's scale after global-norm clipping (update_scale when there is none).
  float ClippedScale(const std::vector<float>& update, double update_scale, std::optional<double> norm_squared) const;
  // Before a step: each state buffer held outside (OptimizerState) is replaced by a
  // free one, and its old values' address goes in `copy_from` (else null) for the step
  // to copy range by range.
  void DetachHeldState(std::vector<const float*>* copy_from);

  OptimizerOptions options_;
  absl::Status resolved_;  // ResolveGroups's
  ModelLayout layout_;
  std::shared_ptr<const std::vector<float>> weights_;       // a new snapshot per step
  std::shared_ptr<std::vector<float>> spare_;               // the one before (Predict's base)
  SharedBuffers snapshots_;                                 // those replaced: a step writes into one let go
  std::shared_ptr<const std::vector<float>> served_;        // Predict's; null: weights_
  SharedBuffers predictions_;                               // those replaced, as snapshots_
  std::vector<std::shared_ptr<std::vector<float>>> state_;  // per StateNames()
  std::vector<SharedBuffers> state_buffers_;                // per StateNames(): those a reader held when replaced
  std::vector<int> group_of_;                               // per tensor of the layout
  std::vector<HyperValues> group_hyper_;                    // per param group
  std::vector<int> role_;                                   // per StateRoles: its index in state_, or -1
  OptimizerScalars scalars_;                                // ScalarState
  std::vector<double> worker_rates_;                        // SetGroupRates; empty: the schedule's
  uint64_t version_ = 0;
  double adam_time_ = 0;  // adam_time()
  uint64_t history_ = 0;  // history()
  double epoch_ = 0;      // SetEpoch
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_PARAMETER_STORE_H_
