#include "server/data/optimizer_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace omnilearn {
namespace server {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A hyperparameter's name and its range, as torch.optim checks it ([lo, hi]; open where
// marked). A flag is 0 or 1.
struct HpInfo {
  Hp hp;
  const char* name;
  double lo, hi;
  bool lo_open = false, hi_open = false, flag = false;
};

const std::vector<HpInfo>& HpTable() {
  static const auto* table = new std::vector<HpInfo>{
      {Hp::kMomentum, "momentum", 0, 1, false, true},
      {Hp::kDampening, "dampening", 0, 1},
      {Hp::kNesterov, "nesterov", 0, 1, false, false, true},
      {Hp::kBeta1, "beta1", 0, 1, false, true},
      {Hp::kBeta2, "beta2", 0, 1, false, true},
      {Hp::kEps, "eps", 0, 1, true},
      {Hp::kAmsgrad, "amsgrad", 0, 1, false, false, true},
      {Hp::kMaximize, "maximize", 0, 1, false, false, true},
      {Hp::kRho, "rho", 0, 1},
      {Hp::kLrDecay, "lr_decay", 0, kInf},
      {Hp::kInitialAccumulatorValue, "initial_accumulator_value", 0, kInf},
      {Hp::kAlpha, "alpha", 0, kInf},
      {Hp::kCentered, "centered", 0, 1, false, false, true},
      {Hp::kEtaMinus, "etaminus", 0, 1, true, true},
      {Hp::kEtaPlus, "etaplus", 1, kInf, true},
      {Hp::kStepSizeMin, "step_size_min", 0, kInf},
      {Hp::kStepSizeMax, "step_size_max", 0, kInf, true},
      {Hp::kLambd, "lambd", 0, kInf},
      {Hp::kT0, "t0", 0, kInf},
      {Hp::kMomentumDecay, "momentum_decay", 0, kInf},
      {Hp::kDecoupledWeightDecay, "decoupled_weight_decay", 0, 1, false, false, true},
      {Hp::kBeta2Decay, "beta2_decay", -kInf, 0},
      {Hp::kD, "d", 0, kInf},
      {Hp::kEps1, "eps1", 0, 1},
      {Hp::kEps2, "eps2", 0, 1},
      {Hp::kLearningRatePower, "learning_rate_power", -kInf, 0},
      {Hp::kL1, "l1_regularization_strength", 0, kInf},
      {Hp::kL2, "l2_regularization_strength", 0, kInf},
      {Hp::kL2Shrinkage, "l2_shrinkage_regularization_strength", 0, kInf},
      {Hp::kBeta, "beta", 0, kInf},
      {Hp::kNsA, "ns_a", -kInf, kInf},
      {Hp::kNsB, "ns_b", -kInf, kInf},
      {Hp::kNsC, "ns_c", -kInf, kInf},
      {Hp::kNsSteps, "ns_steps", 0, 99},
      {Hp::kAdjustLrFn, "adjust_lr_fn", 0, 3},
      {Hp::kRmsRate, "rms_rate", 0, kInf},
      {Hp::kAdamW, "adamw", 0, 1, false, false, true},
      {Hp::kKeras, "keras", 0, 1, false, false, true},
  };
  return *table;
}

const HpInfo& InfoOf(Hp hp) { return HpTable()[static_cast<int>(hp)]; }

constexpr double kFloat32Eps = 1.1920928955078125e-07;  // torch.finfo(torch.float32).eps

// The hyperparameters several rules read, with torch's defaults.
const std::pair<Hp, double> kBeta1Default{Hp::kBeta1, 0.9}, kBeta2Default{Hp::kBeta2, 0.999}, kEps8{Hp::kEps, 1e-8},
    kMaximize{Hp::kMaximize, 0}, kKerasForm{Hp::kKeras, 0};

// The rules of a running average and its betas: the Adam family, Keras's Lion and Lamb.
std::vector<OptimizerRule> BetaRules() {
  using K = OptimizerKind;
  const auto b1 = kBeta1Default, b2 = kBeta2Default, eps8 = kEps8, maximize = kMaximize, keras = kKerasForm;
  return {
      {K::kAdam, "adam", "Adam", 0, {b1, b2, eps8, {Hp::kAmsgrad, 0}, maximize, keras}, false, Hp::kBeta1, true},
      {K::kAdamW, "adamw", "AdamW", 1e-2, {b1, b2, eps8, {Hp::kAmsgrad, 0}, maximize, keras}, false, Hp::kBeta1, true},
      {K::kAdamax, "adamax", "Adamax", 0, {b1, b2, eps8, maximize, keras}, false, Hp::kBeta1, true},
      {K::kNAdam,
       "nadam",
       "NAdam",
       0,
       {b1, b2, eps8, {Hp::kMomentumDecay, 4e-3}, {Hp::kDecoupledWeightDecay, 0}, maximize, keras},
       false,
       Hp::kBeta1,
       true,
       {"mu_product"}},
      {K::kRAdam,
       "radam",
       "RAdam",
       0,
       {b1, b2, eps8, {Hp::kDecoupledWeightDecay, 0}, maximize},
       false,
       Hp::kBeta1,
       true},
      {K::kLion, "lion", "Lion", 0, {b1, {Hp::kBeta2, 0.99}, maximize}, false, Hp::kBeta1},
      {K::kLamb, "lamb", "Lamb", 0, {b1, b2, {Hp::kEps, 1e-6}, maximize}, true, Hp::kBeta1, true},
  };
}

// SGD, the accumulators (Adadelta, Adagrad, RMSprop), Rprop, ASGD: the element-wise rules
// without betas.
std::vector<OptimizerRule> OtherRules() {
  using K = OptimizerKind;
  const auto eps8 = kEps8, maximize = kMaximize, keras = kKerasForm;
  return {
      {K::kSgd,
       "sgd",
       "SGD",
       0,
       {{Hp::kMomentum, 0}, {Hp::kDampening, 0}, {Hp::kNesterov, 0}, maximize, keras},
       false,
       Hp::kMomentum},
      {K::kAdadelta, "adadelta", "Adadelta", 0, {{Hp::kRho, 0.9}, {Hp::kEps, 1e-6}, maximize, keras}, false, {}, true},
      {K::kAdagrad,
       "adagrad",
       "Adagrad",
       0,
       {{Hp::kLrDecay, 0}, {Hp::kInitialAccumulatorValue, 0}, {Hp::kEps, 1e-10}, maximize, keras},
       false,
       {},
       true},
      {K::kRMSprop,
       "rmsprop",
       "RMSprop",
       0,
       {{Hp::kAlpha, 0.99}, eps8, {Hp::kMomentum, 0}, {Hp::kCentered, 0}, maximize, keras},
       false,
       Hp::kMomentum,
       true},
      {K::kRprop,
       "rprop",
       "Rprop",
       -1,  // no weight decay
       {{Hp::kEtaMinus, 0.5}, {Hp::kEtaPlus, 1.2}, {Hp::kStepSizeMin, 1e-6}, {Hp::kStepSizeMax, 50}, maximize}},
      {K::kAsgd,
       "asgd",
       "ASGD",
       0,
       {{Hp::kLambd, 1e-4}, {Hp::kAlpha, 0.75}, {Hp::kT0, 1e6}, maximize},
       false,
       {},
       false,
       {"eta"}},
  };
}

// Adafactor and Muon (whole tensors), Keras's Ftrl: the rules of hyperparameters of their own.
std::vector<OptimizerRule> OwnHyperRules() {
  using K = OptimizerKind;
  const auto maximize = kMaximize, keras = kKerasForm;
  return {
      {K::kAdafactor,
       "adafactor",
       "Adafactor",
       0,
       {{Hp::kBeta2Decay, -0.8}, {Hp::kEps1, kFloat32Eps}, {Hp::kEps2, 1e-3}, {Hp::kD, 1}, maximize, keras},
       true,
       {},
       true},
      {K::kFtrl,
       "ftrl",
       "Ftrl",
       0,
       {{Hp::kLearningRatePower, -0.5},
        {Hp::kInitialAccumulatorValue, 0.1},
        {Hp::kL1, 0},
        {Hp::kL2, 0},
        {Hp::kL2Shrinkage, 0},
        {Hp::kBeta, 0},
        maximize}},
      {K::kMuon,
       "muon",
       "Muon",
       0.1,
       {{Hp::kMomentum, 0.95},
        {Hp::kNesterov, 1},
        {Hp::kEps, 1e-7},
        {Hp::kNsA, 3.4445},
        {Hp::kNsB, -4.7750},
        {Hp::kNsC, 2.0315},
        {Hp::kNsSteps, 5},
        {Hp::kAdjustLrFn, 0},
        {Hp::kRmsRate, 0.2},
        {Hp::kAdamW, 0},
        kBeta1Default,
        kBeta2Default,
        maximize,
        keras},
       true,
       Hp::kMomentum},
  };
}

// Every rule, in OptimizerKind's order (RuleOf indexes by kind).
std::vector<OptimizerRule>* MakeRules() {
  auto* rules = new std::vector<OptimizerRule>(BetaRules());
  for (auto part : {OtherRules(), OwnHyperRules()}) {
    for (OptimizerRule& rule : part) rules->push_back(std::move(rule));
  }
  std::sort(rules->begin(), rules->end(),
            [](const OptimizerRule& a, const OptimizerRule& b) { return a.kind < b.kind; });
  return rules;
}

}  // namespace

const std::vector<OptimizerRule>& OptimizerRules() {
  static const std::vector<OptimizerRule>* rules = MakeRules();
  return *rules;
}

const OptimizerRule& RuleOf(OptimizerKind kind) { return OptimizerRules()[static_cast<int>(kind)]; }

std::string OptimizerNames() {
  std::vector<std::string> names;
  for (const OptimizerRule& r : OptimizerRules()) names.push_back(r.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<OptimizerKind> ParseOptimizer(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (const OptimizerRule& r : OptimizerRules()) {
    if (n == r.name) return r.kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", name, "' (want one of ", OptimizerNames(), ")"));
}

std::string OptimizerName(OptimizerKind kind) { return RuleOf(kind).name; }

const char* HpName(Hp hp) { return InfoOf(hp).name; }

absl::StatusOr<HyperValues> ResolveHyper(OptimizerKind kind, const HyperMap& job, const HyperMap& group) {
  const OptimizerRule& rule = RuleOf(kind);
  HyperValues h{};
  for (const auto& [hp, value] : rule.hyper) h[static_cast<int>(hp)] = value;
  for (const HyperMap* given : {&job, &group}) {
    for (const auto& given_entry : *given) {  // not a structured binding: a lambda below reads it (C++17)
      const std::string& name = given_entry.first;
      const double value = given_entry.second;
      auto it = std::find_if(rule.hyper.begin(), rule.hyper.end(),
                             [&](const std::pair<Hp, double>& p) { return name == HpName(p.first); });
      if (it == rule.hyper.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(rule.torch_class, " has no option '", name, "'", given == &group ? " (a param group's)" : ""));
      }
      const HpInfo& info = InfoOf(it->first);
      const bool in = std::isfinite(value) && (info.lo_open ? value > info.lo : value >= info.lo) &&
                      (info.hi_open ? value < info.hi : value <= info.hi) && (!info.flag || value == 0 || value == 1);
      if (!in && !(value == kInf && info.hi == kInf)) {
        return absl::InvalidArgumentError(absl::StrCat(rule.torch_class, "'s ", name, " = ", value, " is out of range",
                                                       info.flag ? " (a flag: 0 or 1)" : ""));
      }
      h[static_cast<int>(it->first)] = value;
    }
  }
  auto at = [&h](Hp hp) { return h[static_cast<int>(hp)]; };
  if (kind == OptimizerKind::kSgd && at(Hp::kNesterov) != 0 && (at(Hp::kMomentum) <= 0 || at(Hp::kDampening) != 0)) {
    return absl::InvalidArgumentError("SGD's nesterov needs momentum > 0 and dampening 0 (torch.optim's rule)");
  }
  for (Hp whole : {Hp::kNsSteps, Hp::kAdjustLrFn}) {
    if (at(whole) != std::floor(at(whole))) {
      return absl::InvalidArgumentError(
          absl::StrCat(rule.torch_class, "'s ", HpName(whole), " must be a whole number"));
    }
  }
  if (kind == OptimizerKind::kRprop && at(Hp::kStepSizeMin) > at(Hp::kStepSizeMax)) {
    return absl::InvalidArgumentError("Rprop's step_size_min is above its step_size_max");
  }
  return h;
}

std::string DescribeHyper(OptimizerKind kind, const HyperValues& h) {
  // torch.optim's pairs, written as torch writes them: betas=(0.9, 0.999).
  static const auto* pairs =
      new std::map<Hp, std::pair<Hp, const char*>>{{Hp::kBeta1, {Hp::kBeta2, "betas"}},
                                                   {Hp::kEtaMinus, {Hp::kEtaPlus, "etas"}},
                                                   {Hp::kStepSizeMin, {Hp::kStepSizeMax, "step_sizes"}},
                                                   {Hp::kEps1, {Hp::kEps2, "eps"}}};
  auto value = [&h](Hp hp) {
    const double v = h[static_cast<int>(hp)];
    return InfoOf(hp).flag ? std::string(v != 0 ? "True" : "False") : absl::StrCat(v);
  };
  std::vector<std::string> parts;
  for (const auto& entry : RuleOf(kind).hyper) {  // not a structured binding: a lambda below reads it (C++17)
    const Hp hp = entry.first;
    if ((hp == Hp::kKeras || hp == Hp::kAdamW) && h[static_cast<int>(hp)] == 0) continue;  // ours: named when on
    if (auto pair = pairs->find(hp); pair != pairs->end()) {
      parts.push_back(absl::StrCat(pair->second.second, "=(", value(hp), ", ", value(pair->second.first), ")"));
    } else if (std::none_of(pairs->begin(), pairs->end(), [hp](const auto& p) { return p.second.first == hp; })) {
      parts.push_back(absl::StrCat(HpName(hp), "=", value(hp)));
    }
  }
  return absl::StrJoin(parts, ", ");
}

std::vector<std::string> StateNames(OptimizerKind kind, const std::vector<HyperValues>& groups) {
  auto any = [&groups](Hp hp) {
    return std::any_of(groups.begin(), groups.end(),
                       [hp](const HyperValues& h) { return h[static_cast<int>(hp)] > 0; });
  };
  switch (kind) {
    case OptimizerKind::kSgd:
      return {"momentum"};
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      if (any(Hp::kAmsgrad)) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
      return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::kAdadelta:
      return {"square_avg", "acc_delta"};
    case OptimizerKind::kAdagrad:
      return {"sum"};
    case OptimizerKind::kAdamax:
      return {"exp_avg", "exp_inf"};
    case OptimizerKind::kNAdam:
    case OptimizerKind::kRAdam:
      return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::kRMSprop: {
      std::vector<std::string> names = {"square_avg"};
      if (any(Hp::kMomentum)) names.push_back("momentum_buffer");
      if (any(Hp::kCentered)) names.push_back("grad_avg");
      return names;
    }
    case OptimizerKind::kRprop:
      return {"prev", "step_size"};
    case OptimizerKind::kAsgd:
      return {"ax"};
    case OptimizerKind::kAdafactor:
      return {"row_var", "col_var"};
    case OptimizerKind::kLion:
      return {"exp_avg"};
    case OptimizerKind::kLamb:
      return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::kFtrl:
      return {"accumulator", "linear"};
    case OptimizerKind::kMuon:  // Keras's AdamW groups keep a second moment too
      if (any(Hp::kAdamW)) return {"momentum_buffer", "exp_avg_sq"};
      return {"momentum_buffer"};
  }
  return {};
}

}  // namespace server
}  // namespace omnilearn
