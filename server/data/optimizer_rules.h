// The optimizers the server runs, as torch.optim defines them: each one's name, the
// hyperparameters it reads (torch's names and defaults), its state, and what the async rule
// and a sharded job need to know of it. The arithmetic is data/optimizer_steps.h's; the
// store (data/parameter_store.h) holds the state and the order of a step. No gRPC, no torch.
#ifndef OMNILEARN_SERVER_DATA_OPTIMIZER_RULES_H_
#define OMNILEARN_SERVER_DATA_OPTIMIZER_RULES_H_

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace omnilearn {
namespace server {

enum class OptimizerKind {
  kSgd,
  kAdam,
  kAdamW,
  kAdadelta,
  kAdagrad,
  kAdamax,
  kNAdam,
  kRAdam,
  kRMSprop,
  kRprop,
  kAsgd,
  kAdafactor,
  kLion,  // Keras's (Chen et al., 2023): decoupled decay, the sign of an interpolated momentum
  kLamb,  // Keras's (You et al., 2019): Adam's step scaled by each tensor's trust ratio
  kFtrl,  // Keras's (McMahan et al., 2013): follow the regularized leader, a proximal step
  kMuon,  // torch's and Keras's (Jordan et al., 2024): each matrix's momentum orthogonalized
};

// Every hyperparameter but the rate and the weight decay, by torch.optim's name; a pair
// (betas, etas, step_sizes) as two, a flag (nesterov, amsgrad, ...) as 0 or 1.
enum class Hp {
  kMomentum,
  kDampening,
  kNesterov,
  kBeta1,
  kBeta2,
  kEps,
  kAmsgrad,
  kMaximize,
  kRho,
  kLrDecay,  // Adagrad's (the schedule's gamma is OptimizerOptions::lr_decay)
  kInitialAccumulatorValue,
  kAlpha,
  kCentered,
  kEtaMinus,
  kEtaPlus,
  kStepSizeMin,
  kStepSizeMax,
  kLambd,
  kT0,
  kMomentumDecay,
  kDecoupledWeightDecay,
  kBeta2Decay,
  kD,
  kEps1,
  kEps2,
  // Keras's Ftrl, by Keras's names.
  kLearningRatePower,
  kL1,
  kL2,
  kL2Shrinkage,
  kBeta,
  // Muon: the Newton-Schulz iteration's coefficients (torch's ns_coefficients) and steps;
  // the rate's adjustment (torch's adjust_lr_fn: 0 "original", 1 "match_rms_adamw",
  // 2 "spectral_unclamped", 3 none), match_rms_adamw's factor (Keras's rms_rate); ours,
  // for Keras's Muon: a group stepped by Keras's AdamW instead (its vectors, embeddings and
  // excluded layers).
  kNsA,
  kNsB,
  kNsC,
  kNsSteps,
  kAdjustLrFn,
  kRmsRate,
  kAdamW,
  // Ours, for the Keras door: the step as Keras writes it (epsilon inside Adagrad's and
  // RMSprop's square root, after Adamax's maximum and Adam's bias correction; the rate inside
  // RMSprop's momentum; Nadam's momentum schedule 0.96^t; decoupled decay; the step's scalars
  // in float32).
  kKeras,
};
inline constexpr int kHpCount = static_cast<int>(Hp::kKeras) + 1;

// A group's hyperparameters, indexed by Hp: the rule's defaults overridden by the job's and
// the group's. Those the rule does not read are 0.
using HyperValues = std::array<double, kHpCount>;
// Hyperparameters by name, as flags, workers and checkpoints give them.
using HyperMap = std::map<std::string, double>;

struct OptimizerRule {
  OptimizerKind kind;
  const char* name;                          // "sgd": flags and checkpoints
  const char* torch_class;                   // "SGD"
  double weight_decay;                       // torch's default
  std::vector<std::pair<Hp, double>> hyper;  // what the step reads, with torch's defaults
  // The step reads whole tensors (Adafactor's row and column statistics): a sharded job,
  // whose slices cut tensors, cannot run it.
  bool whole_tensors = false;
  // What the async rule lowers as it lowers SGD's momentum; none: nothing.
  std::optional<Hp> momentum;
  // Adaptive (the step divides by a running scale of the gradient): a push of share f of a
  // global batch moves by sqrt(f) of a step, its moving averages decay by beta^f
  // (ParameterStore::Apply's square-root rule). Else a push moves by f of a step.
  bool adaptive = false;
  // Per-group scalars of state (NAdam's mu_product, ASGD's eta), kept in checkpoints.
  std::vector<const char*> scalars;
};

const std::vector<OptimizerRule>& OptimizerRules();
const OptimizerRule& RuleOf(OptimizerKind kind);

// By name ("sgd", "RMSprop", case-insensitive). InvalidArgument naming those it runs.
absl::StatusOr<OptimizerKind> ParseOptimizer(absl::string_view name);
std::string OptimizerName(OptimizerKind kind);
// "sgd, adam, adamw, ...", for messages.
std::string OptimizerNames();
const char* HpName(Hp hp);

// The rule's defaults, then `job`, then `group` (later wins). InvalidArgument naming a
// hyperparameter the rule does not read or a value out of its range.
absl::StatusOr<HyperValues> ResolveHyper(OptimizerKind kind, const HyperMap& job, const HyperMap& group);

// The rule's hyperparameters as torch.optim writes them: "momentum=0.9, nesterov=True".
std::string DescribeHyper(OptimizerKind kind, const HyperValues& h);

// The model-sized state buffers a job keeps, in order (torch.optim's state names): those of
// the rule, and those an option of some group adds (Adam's amsgrad, RMSprop's momentum and
// centered). SGD keeps "momentum" always (its checkpoints have it).
std::vector<std::string> StateNames(OptimizerKind kind, const std::vector<HyperValues>& groups);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_OPTIMIZER_RULES_H_
