// The optimizers' arithmetic, torch.optim's single-tensor step of each rule in
// data/optimizer_rules.h: a group's scalars worked out once a step (PrepareStep), then the
// elements of each tensor stepped from a snapshot into the next (StepElements), or, for a
// rule that reads whole tensors, each tensor at once (StepWholeTensor). No gRPC, no torch.
#ifndef OMNILEARN_SERVER_DATA_OPTIMIZER_STEPS_H_
#define OMNILEARN_SERVER_DATA_OPTIMIZER_STEPS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/data/optimizer_rules.h"

namespace omnilearn {
namespace server {

// The state buffers a kernel reads, by role (StateRoles' order); null where the job keeps
// none (Adam without amsgrad has no max_exp_avg_sq).
inline constexpr int kMaxStateRoles = 3;
using StatePointers = std::array<float*, kMaxStateRoles>;

// The roles of a rule's state buffers, in the order StatePointers holds them; StateNames
// (optimizer_rules.h) is the part of them a job keeps.
std::vector<std::string> StateRoles(OptimizerKind kind);

// One group's step, its scalars as float (torch's kernels apply a Python scalar as the
// tensor's type), each named as torch.optim's step names it.
struct StepCoefficients {
  OptimizerKind kind = OptimizerKind::kSgd;
  float scale = 1;  // the gradient is scale * update (clipping; negative: maximize)
  float lr = 0, wd = 0;
  bool decoupled = false;  // the decay multiplies the weights (AdamW, decoupled_weight_decay)
  bool first = false;      // the optimizer's first step (SGD's buffer starts as the gradient)
  bool velocity = false;   // SGD keeps a velocity (momentum configured, or this step's)
  // SGD, RMSprop: momentum; (1 - dampening) after the first step; nesterov.
  float momentum = 0, damp = 1;
  bool nesterov = false;
  // The Adam family: the moving averages' decays and eps, as the step applies them.
  // Adadelta's rho is its beta1, RMSprop's alpha its beta2.
  float beta1 = 0, beta2 = 0, one_minus_beta1 = 1, one_minus_beta2 = 1, eps = 0;
  bool amsgrad = false, centered = false;
  bool keras = false;  // Hp::kKeras: Keras's form of the step (the Keras* kernels)
  // Keras's Nadam: u_{t+1}, 1 - u_t, 1 - prod(u)_{t+1} and 1 - prod(u)_t.
  float u_next = 0, one_minus_u = 0, product_next_gap = 1, product_gap = 1;
  // Adam: lr / bias1 and sqrt(bias2); Adamax: lr / bias1; NAdam: bias2 and the
  // gradient's and the average's coefficients; RAdam: the rectified (or plain) rate;
  // Adagrad: its decayed rate.
  float step_size = 0, bias2_sqrt = 1, bias2 = 1, c_grad = 0, c_avg = 0;
  bool rectified = false;
  // Rprop.
  float etaminus = 0, etaplus = 0, step_min = 0, step_max = 0;
  // The weights' factor before the step: 1 - lr * wd for decoupled decay (at the rate
  // without the square-root rule: linear in the samples), ASGD's 1 - lambd * eta.
  float keep = 1;
  float linear_lr = 0;  // the rate without the square-root rule (Keras's decay reads it)
  // ASGD: the step's eta and the average's weight (1: the average is the weights).
  float eta = 0, average = 1;
  // Adafactor: rho_t, eps1, eps2, d (its 1 - beta2_t is one_minus_beta2; Keras's beta2_t
  // is beta2, its clip_threshold d).
  float rho = 0, eps1 = 0, eps2 = 0, d = 1;
  // Ftrl: -learning_rate_power, the L1 strength, twice the L2 strength (beta's part in),
  // twice the shrinkage's.
  float power = 0.5f, l1 = 0, l2_twice = 0, shrinkage_twice = 0;
  // Muon: the iteration, the rate's adjustment (Hp::kAdjustLrFn) with its factor, and a
  // group of Keras's that Keras's AdamW steps (its scalars: Keras's Adam's).
  float ns_a = 0, ns_b = 0, ns_c = 0, rms_rate = 0;
  int ns_steps = 0, adjust_lr_fn = 0;
  bool adamw = false;
};

// A group's step: `lr` its rate (schedule, group and a push's scale applied), `wd` its
// decay, `time` the optimizer's step count after this step (in global batches: 1 first in
// sync), `share` the step's part of a global batch (the adaptive rules' square-root rule,
// OptimizerRule::adaptive), `scale` the update's after clipping, `momentum` the async
// rule's for this step (OptimizerRule::momentum; none: the group's). `scalars` is the
// group's scalar state (OptimizerRule::scalars), read and advanced.
struct GroupStepInput {
  double lr = 0, wd = 0, time = 1, share = 1;
  float scale = 1;
  std::optional<double> momentum;
};
StepCoefficients PrepareStep(OptimizerKind kind, const HyperValues& h, const GroupStepInput& in,
                             std::vector<double>* scalars);

// Elements [lo, hi) of one parameter tensor: `w` its weights before the step, `u` its
// update, `out` the weights after, `s` its state buffers (each offset to the tensor).
void StepElements(const StepCoefficients& k, const float* w, const float* u, float* out, const StatePointers& s,
                  int64_t lo, int64_t hi);

// A rule with whole_tensors (Adafactor, Lamb, Muon): the tensor of `shape`, all of it.
void StepWholeTensor(const StepCoefficients& k, const std::vector<int64_t>& shape, const float* w, const float* u,
                     float* out, const StatePointers& s);

// The value a state buffer starts at (Adagrad's and Ftrl's initial_accumulator_value; else 0).
float InitialState(OptimizerKind kind, const std::string& name, const HyperValues& h);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_OPTIMIZER_STEPS_H_
