#include "server/data/parameter_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/parallel_for.h"
#include "common/tensor_codec.h"

namespace omnilearn {
namespace server {
namespace {

// Elements per range of a parallel step: 1 MiB of floats, so small models step inline.
constexpr int64_t kStepGrain = 1 << 18;

// A buffer tensor's (BatchNorm statistics') step: toward the update's values.
void BlendRange(float* __restrict out, const float* __restrict w, const float* __restrict u, int64_t lo, int64_t hi,
                float blend, float us) {
  for (int64_t i = lo; i < hi; ++i) out[i] = w[i] + blend * (us * u[i] - w[i]);
}

// Tensor t's part of the flat range [begin, end), as offsets into the tensor: [lo, hi),
// empty when lo >= hi.
struct TensorPart {
  TensorPart(const ModelLayout& layout, int t, int64_t begin, int64_t end)
      : off(layout.offset(t)),
        lo(std::max<int64_t>(begin, off) - off),
        hi(std::min<int64_t>(end, off + layout.size(t)) - off) {}
  const int64_t off, lo, hi;
};

}  // namespace

absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "constant") return LrSchedule::kConstant;
  if (n == "step") return LrSchedule::kStep;
  if (n == "cosine") return LrSchedule::kCosine;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown learning-rate schedule '", name, "' (want constant, step or cosine)"));
}

HyperMap JobHyper(const OptimizerOptions& o) {
  HyperMap job;
  for (const auto& [hp, unused] : RuleOf(o.kind).hyper) {
    if (hp == Hp::kMomentum) job["momentum"] = o.momentum;
    if (hp == Hp::kBeta1) job["beta1"] = o.beta1;
    if (hp == Hp::kBeta2) job["beta2"] = o.beta2;
    if (hp == Hp::kEps && o.eps > 0) job["eps"] = o.eps;
  }
  for (const auto& [name, value] : o.hyper) job[name] = value;
  return job;
}

bool SameSteps(const OptimizerOptions& a, const OptimizerOptions& b) {
  return a.kind == b.kind && a.learning_rate == b.learning_rate && a.weight_decay == b.weight_decay &&
         JobHyper(a) == JobHyper(b) && a.groups == b.groups;
}

absl::Status ResolveGroupNames(const ModelLayout& layout, bool pieces, std::vector<ParamGroup>* groups) {
  std::map<std::string, int> group_of;  // a name's group
  for (size_t g = 0; g < groups->size(); ++g) {
    for (const std::string& name : (*groups)[g].names) group_of[name] = static_cast<int>(g);
    (*groups)[g].tensors.clear();
  }
  std::set<std::string> found;
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) {
    std::string name = layout.tensors()[t].name;
    if (const size_t at = name.rfind('@'); pieces && at != std::string::npos) name.resize(at);
    auto it = group_of.find(name);
    if (it == group_of.end()) continue;  // a buffer, or a parameter in no group (AssignGroups says which)
    (*groups)[it->second].tensors.push_back(t);
    found.insert(name);
  }
  for (size_t g = 0; g < groups->size() && !pieces; ++g) {
    for (const std::string& name : (*groups)[g].names) {
      if (found.count(name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("the optimizer's param group ", g, " names '", name, "', not in the model"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  auto bad = [](absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat("optimizer: ", what)); };
  const OptimizerRule& rule = RuleOf(o.kind);
  if (!(o.learning_rate > 0 && std::isfinite(o.learning_rate))) return bad("the learning rate must be > 0");
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) return bad("weight decay must be >= 0");
  // The typed fields, whatever the rule reads (they are the flags' and the wire's).
  if (!(o.momentum >= 0 && o.momentum < 1)) return bad("momentum must be in [0, 1)");
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1)) return bad("betas must be in [0, 1)");
  if (!(o.eps != 0 && std::isfinite(o.eps))) return bad("eps must be > 0 (< 0: the optimizer's default)");
  if (rule.weight_decay < 0 && o.weight_decay != 0) return bad(absl::StrCat(rule.torch_class, " has no weight decay"));
  if (!(o.clip_grad_norm >= 0 && std::isfinite(o.clip_grad_norm))) return bad("the clipping norm must be >= 0");
  if (!(o.lr_decay_epochs >= 0)) return bad("lr_decay_epochs must be >= 0");
  const HyperMap job = JobHyper(o);
  if (absl::StatusOr<HyperValues> h = ResolveHyper(o.kind, job, {}); !h.ok()) return bad(h.status().message());
  for (size_t g = 0; g < o.groups.size(); ++g) {
    const std::string group = absl::StrCat("param group ", g, "'s ");
    if (!(o.groups[g].lr > 0 && std::isfinite(o.groups[g].lr))) return bad(group + "learning rate must be > 0");
    if (!(o.groups[g].weight_decay >= 0 && std::isfinite(o.groups[g].weight_decay))) {
      return bad(group + "weight decay must be >= 0");
    }
    if (rule.weight_decay < 0 && o.groups[g].weight_decay != 0) {
      return bad(absl::StrCat(rule.torch_class, " has no weight decay"));
    }
    absl::StatusOr<HyperValues> h = ResolveHyper(o.kind, job, o.groups[g].hyper);
    if (!h.ok()) return bad(absl::StrCat(group, h.status().message()));
  }
  if (o.lr_decay_steps > 0 && o.lr_decay_epochs > 0) {
    return bad("the step schedule counts versions (lr_decay_steps) or epochs (lr_decay_epochs), not both");
  }
  if (o.schedule == LrSchedule::kStep &&
      ((o.lr_decay_steps == 0 && o.lr_decay_epochs == 0) || !(o.lr_decay > 0 && o.lr_decay <= 1))) {
    return bad("the step schedule needs lr_decay_steps > 0 or lr_decay_epochs > 0, and 0 < lr_decay <= 1");
  }
  if (o.schedule == LrSchedule::kCosine && (o.cosine_steps == 0 || !(o.lr_min >= 0 && o.lr_min <= o.learning_rate))) {
    return bad("the cosine schedule needs cosine_steps > 0 and 0 <= lr_min <= lr");
  }
  return absl::OkStatus();
}

std::string DescribeOptimizer(const OptimizerOptions& o) {
  const OptimizerRule& rule = RuleOf(o.kind);
  const absl::StatusOr<HyperValues> h = ResolveHyper(o.kind, JobHyper(o), {});
  std::string out = absl::StrCat(rule.torch_class, "(lr=", o.learning_rate);
  if (h.ok() && !rule.hyper.empty()) absl::StrAppend(&out, ", ", DescribeHyper(o.kind, *h));
  if (rule.weight_decay >= 0) absl::StrAppend(&out, ", weight_decay=", o.weight_decay);
  absl::StrAppend(&out, ")");
  for (size_t g = 0; g < o.groups.size(); ++g) {
    absl::StrAppend(&out, g == 0 ? ", param groups: " : "; ", g, ": ", o.groups[g].tensors.size(),
                    " tensors lr=", o.groups[g].lr, " weight_decay=", o.groups[g].weight_decay);
    for (const auto& [name, value] : o.groups[g].hyper) absl::StrAppend(&out, " ", name, "=", value);
  }
  absl::StrAppend(&out, ", clip_grad_norm=", o.clip_grad_norm, ", warmup_steps=", o.warmup_steps, ", schedule=");
  switch (o.schedule) {
    case LrSchedule::kConstant:
      return absl::StrCat(out, "constant");
    case LrSchedule::kStep:
      return absl::StrCat(
          out, "step(gamma=", o.lr_decay, ", every ",
          o.lr_decay_epochs > 0 ? absl::StrCat(o.lr_decay_epochs, " epochs") : absl::StrCat(o.lr_decay_steps, " steps"),
          ")");
    case LrSchedule::kCosine:
      return absl::StrCat(out, "cosine(steps=", o.cosine_steps, ", lr_min=", o.lr_min, ")");
  }
  return out;
}

ParameterStore::ParameterStore(const OptimizerOptions& options) : options_(options) { resolved_ = ResolveGroups(); }

absl::Status ParameterStore::ResolveGroups() {
  const HyperMap job = JobHyper(options_);
  group_hyper_.clear();
  for (size_t g = 0; g < group_count(); ++g) {
    absl::StatusOr<HyperValues> h =
        ResolveHyper(options_.kind, job, options_.groups.empty() ? HyperMap{} : options_.groups[g].hyper);
    if (!h.ok()) {  // ValidateOptimizerOptions refuses these options: Initialize says so
      group_hyper_.assign(group_count(), *ResolveHyper(options_.kind, {}, {}));
      return h.status();
    }
    group_hyper_.push_back(*h);
  }
  const std::vector<std::string> roles = StateRoles(options_.kind), names = StateNames();
  role_.assign(kMaxStateRoles, -1);
  for (size_t r = 0; r < roles.size(); ++r) {
    auto it = std::find(names.begin(), names.end(), roles[r]);
    if (it != names.end()) role_[r] = static_cast<int>(it - names.begin());
  }
  return absl::OkStatus();
}

absl::Status ParameterStore::Initialize(ModelLayout layout, std::vector<float> values, uint64_t version) {
  if (initialized()) return absl::FailedPreconditionError("the model is already initialized");
  if (!resolved_.ok()) return resolved_;
  if (static_cast<int64_t>(values.size()) != layout.total_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial parameters have ", values.size(), " values, the layout needs ", layout.total_elements()));
  }
  if (!AllFinite(values)) return absl::InvalidArgumentError("initial parameters contain NaN or Inf");
  if (absl::Status s = AssignGroups(layout); !s.ok()) return s;
  layout_ = std::move(layout);
  weights_ = std::make_shared<std::vector<float>>(std::move(values));  // not const: retired as spare_ later
  InitializeState();
  spare_.reset();
  snapshots_.Clear();
  served_.reset();
  predictions_.Clear();
  version_ = version;
  adam_time_ = static_cast<double>(version);
  return absl::OkStatus();
}

void ParameterStore::InitializeState() {
  const std::vector<std::string> names = StateNames();
  state_.clear();
  for (const std::string& name : names) {
    auto buffer = std::make_shared<std::vector<float>>(weights_->size());
    for (int t = 0; t < static_cast<int>(layout_.tensors().size()); ++t) {
      const float start = InitialState(options_.kind, name, group_hyper_[group_of_[t]]);
      if (start != 0) std::fill_n(buffer->data() + layout_.offset(t), layout_.size(t), start);
    }
    state_.push_back(std::move(buffer));
  }
  state_buffers_.assign(state_.size(), SharedBuffers());
  scalars_.clear();
  for (const char* name : RuleOf(options_.kind).scalars) {
    // NAdam's mu_product starts at 1; ASGD's eta at 0, which its first step reads as the rate.
    scalars_[name].assign(group_count(), std::string(name) == "mu_product" ? 1.0 : 0.0);
  }
}

double ParameterStore::ScheduledRate() const {
  const OptimizerOptions& o = options_;
  if (version_ < o.warmup_steps) {
    return o.learning_rate * static_cast<double>(version_ + 1) / static_cast<double>(o.warmup_steps);
  }
  const uint64_t s = version_ - o.warmup_steps;
  switch (o.schedule) {
    case LrSchedule::kConstant:
      return o.learning_rate;
    case LrSchedule::kStep:
      if (o.lr_decay_epochs > 0) return o.learning_rate * std::pow(o.lr_decay, std::floor(epoch_ / o.lr_decay_epochs));
      return o.learning_rate * std::pow(o.lr_decay, static_cast<double>(s / o.lr_decay_steps));
    case LrSchedule::kCosine: {
      const double progress = static_cast<double>(std::min(s, o.cosine_steps)) / static_cast<double>(o.cosine_steps);
      return o.lr_min + (o.learning_rate - o.lr_min) * (1 + std::cos(M_PI * progress)) / 2;
    }
  }
  return o.learning_rate;
}

double ParameterStore::GroupRate(size_t g) const {
  if (!worker_rates_.empty()) return worker_rates_[g];
  if (options_.groups.empty()) return ScheduledRate();
  return ScheduledRate() * options_.groups[g].lr / options_.learning_rate;
}

absl::Status ParameterStore::SetGroupRates(std::vector<double> rates) {
  if (rates.size() != group_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat(rates.size(), " learning rates for the job's ", group_count(), " param groups"));
  }
  for (double r : rates) {
    if (!(r > 0 && std::isfinite(r))) return absl::InvalidArgumentError(absl::StrCat("a learning rate of ", r));
  }
  worker_rates_ = std::move(rates);
  return absl::OkStatus();
}

absl::Status ParameterStore::AssignGroups(const ModelLayout& layout) {
  const int tensors = static_cast<int>(layout.tensors().size());
  group_of_.assign(tensors, options_.groups.empty() ? 0 : -1);
  for (size_t g = 0; g < options_.groups.size(); ++g) {
    for (int t : options_.groups[g].tensors) {
      if (t < 0 || t >= tensors || layout.is_buffer(t)) {
        return absl::InvalidArgumentError(
            absl::StrCat("param group ", g, " names tensor ", t, ", not a parameter of the model"));
      }
      if (group_of_[t] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", layout.tensors()[t].name, "' is in param groups ", group_of_[t], " and ", g));
      }
      group_of_[t] = static_cast<int>(g);
    }
  }
  for (int t = 0; t < tensors; ++t) {
    if (group_of_[t] < 0 && !layout.is_buffer(t)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", layout.tensors()[t].name, "' is in no param group"));
    }
    group_of_[t] = std::max(group_of_[t], 0);  // a buffer's blend reads no group
  }
  return CheckMatrices(layout);
}

absl::Status ParameterStore::CheckMatrices(const ModelLayout& layout) const {
  if (options_.kind != OptimizerKind::kMuon) return absl::OkStatus();
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) {
    const std::vector<int64_t>& shape = layout.tensors()[t].shape;
    if (layout.is_buffer(t) || shape.size() == 2 || group_hyper_[group_of_[t]][static_cast<int>(Hp::kAdamW)] != 0) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "Muon steps matrices, and tensor '", layout.tensors()[t].name, "' has ", shape.size(),
        " dimensions: give its vectors and other tensors an AdamW (omnilearn.Worker(optimizer=[muon, adamw]), "
        "as torch.optim.Muon's docs do), or a param group with adamw=1"));
  }
  return absl::OkStatus();
}

double UpdateSumSquares(const ModelLayout& layout, const std::vector<float>& update, double scale) {
  double sum = 0;
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) {
    if (layout.is_buffer(t)) continue;
    const float* g = update.data() + layout.offset(t);
    float part = 0;
    for (int64_t i = 0; i < layout.size(t); ++i) part += g[i] * g[i];
    sum += part;
  }
  return scale * scale * sum;
}

float ParameterStore::ClippedScale(const std::vector<float>& update, double update_scale,
                                   std::optional<double> norm_squared) const {
  const float us = static_cast<float>(update_scale);
  if (options_.clip_grad_norm <= 0) return us;
  double sum_squares = 0;
  if (norm_squared.has_value()) {
    sum_squares = *norm_squared;
  } else {
    sum_squares = UpdateSumSquares(layout_, update, update_scale);
    if (options_.norm_reduction) sum_squares = options_.norm_reduction(version_, sum_squares);
  }
  const double factor = options_.clip_grad_norm / (std::sqrt(sum_squares) + 1e-6);
  return factor < 1 ? static_cast<float>(update_scale * factor) : us;
}

void ParameterStore::Apply(const std::vector<float>& update, const StepSettings& step) {
  const double share = step.sample_share > 0 ? std::min(step.sample_share, 1.0) : 1.0;
  const float clipped = ClippedScale(update, step.update_scale, step.norm_squared);
  std::vector<StepCoefficients> ks;  // per param group
  for (size_t g = 0; g < group_count(); ++g) {
    GroupStepInput in;
    in.lr = g < step.group_rates.size() ? step.group_rates[g]
            : step.learning_rate        ? *step.learning_rate
                                        : GroupRate(g) * step.lr_scale;
    in.wd = options_.groups.empty() ? options_.weight_decay : options_.groups[g].weight_decay;
    in.time = adam_time_ + share;
    in.share = share;
    in.scale = clipped;
    in.momentum = step.momentum;
    if (const std::optional<Hp> m = RuleOf(options_.kind).momentum; step.momentum_cut > 0 && m.has_value()) {
      in.momentum = std::max(0.0, group_hyper_[g][static_cast<int>(*m)] - step.momentum_cut);
    }
    std::vector<double> scalars;
    for (auto& [name, values] : scalars_) scalars.push_back(values[g]);
    ks.push_back(PrepareStep(options_.kind, group_hyper_[g], in, &scalars));
    size_t i = 0;
    for (auto& [name, values] : scalars_) values[g] = scalars[i++];
  }
  // The new snapshot is written straight from the old one (no copy first), into one a
  // reader let go of (an in-memory checkpoint holds its version across rounds).
  snapshots_.Retire(std::move(spare_));
  std::shared_ptr<std::vector<float>> next = snapshots_.Take(weights_->size());
  std::vector<const float*> copy_from;
  DetachHeldState(&copy_from);
  StepAll(ks, step, update, next->data(), copy_from);
  spare_ = std::const_pointer_cast<std::vector<float>>(std::move(weights_));
  weights_ = std::move(next);
  ++version_;
  adam_time_ += share;
}

StatePointers ParameterStore::StateAt(int64_t offset) const {
  StatePointers s{};
  for (int r = 0; r < kMaxStateRoles; ++r) s[r] = role_[r] < 0 ? nullptr : state_[role_[r]]->data() + offset;
  return s;
}

void ParameterStore::StepAll(const std::vector<StepCoefficients>& ks, const StepSettings& step,
                             const std::vector<float>& update, float* next,
                             const std::vector<const float*>& copy_from) {
  const float blend = static_cast<float>(step.buffer_blend), us = static_cast<float>(step.update_scale);
  const int tensors = static_cast<int>(layout_.tensors().size());
  const float* w = weights_->data();
  const float* u = update.data();
  auto copy_held = [&](int64_t begin, int64_t end) {
    for (size_t i = 0; i < state_.size(); ++i) {
      if (copy_from[i] != nullptr) {
        std::memcpy(state_[i]->data() + begin, copy_from[i] + begin, (end - begin) * sizeof(float));
      }
    }
  };
  if (RuleOf(options_.kind).whole_tensors) {  // each tensor at once, the held state copied first
    ParallelFor(layout_.total_elements(), kStepGrain, copy_held);
    ParallelFor(tensors, 1, [&](int64_t first, int64_t last) {
      for (int t = static_cast<int>(first); t < last; ++t) {
        const int64_t off = layout_.offset(t);
        if (layout_.is_buffer(t)) {
          BlendRange(next + off, w + off, u + off, 0, layout_.size(t), blend, us);
          continue;
        }
        StepWholeTensor(ks[group_of_[t]], layout_.tensors()[t].shape, w + off, u + off, next + off, StateAt(off));
      }
    });
    return;
  }
  // Element-wise: split across cores by ranges of the flat model (ParallelFor).
  ParallelFor(layout_.total_elements(), kStepGrain, [&](int64_t begin, int64_t end) {
    copy_held(begin, end);
    for (int t = 0; t < tensors; ++t) {
      const auto [off, lo, hi] = TensorPart(layout_, t, begin, end);
      if (lo >= hi) continue;
      if (layout_.is_buffer(t)) {
        BlendRange(next + off, w + off, u + off, lo, hi, blend, us);
      } else {
        StepElements(ks[group_of_[t]], w + off, u + off, next + off, StateAt(off), lo, hi);
      }
    }
  });
}

void ParameterStore::Predict(double steps) {
  predictions_.Retire(std::const_pointer_cast<std::vector<float>>(std::move(served_)));
  served_.reset();
  if (steps <= 0 || spare_ == nullptr || spare_->size() != weights_->size()) return;  // served() is weights()
  std::shared_ptr<std::vector<float>> next = predictions_.Take(weights_->size());
  const float s = static_cast<float>(steps);
  const float* w = weights_->data();
  const float* before = spare_->data();
  float* out = next->data();
  ParallelFor(layout_.total_elements(), kStepGrain, [&](int64_t begin, int64_t end) {
    for (int t = 0; t < static_cast<int>(layout_.tensors().size()); ++t) {
      const auto [off, lo, hi] = TensorPart(layout_, t, begin, end);
      if (layout_.is_buffer(t)) {  // served as it is
        std::copy(w + off + lo, w + off + hi, out + off + lo);
        continue;
      }
      for (int64_t i = off + lo; i < off + hi; ++i) out[i] = w[i] + s * (w[i] - before[i]);
    }
  });
  served_ = std::move(next);
}

void ParameterStore::DetachHeldState(std::vector<const float*>* copy_from) {
  copy_from->assign(state_.size(), nullptr);
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].use_count() == 1) continue;  // only the store holds it: stepped in place
    (*copy_from)[i] = state_[i]->data();       // the holder keeps it alive through the step
    const size_t size = state_[i]->size();
    state_buffers_[i].Retire(std::move(state_[i]));
    state_[i] = state_buffers_[i].Take(size);
  }
}

uint64_t ParameterStore::buffers_allocated() const {
  uint64_t allocated = snapshots_.allocated() + predictions_.allocated();
  for (const SharedBuffers& buffers : state_buffers_) allocated += buffers.allocated();
  return allocated;
}

OptimizerBuffers ParameterStore::OptimizerState() const {
  OptimizerBuffers out;
  const std::vector<std::string> names = StateNames();
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], state_[i]);
  return out;
}

absl::Status ParameterStore::Restore(ModelLayout layout, std::vector<float> weights, const OptimizerBuffers& state,
                                     uint64_t version, double adam_time, const OptimizerScalars& scalars,
                                     std::vector<double> group_rates) {
  if (initialized()) return absl::FailedPreconditionError("the model is already initialized");
  const std::vector<std::string> names = StateNames();
  std::vector<std::string> got;
  for (const auto& [name, values] : state) got.push_back(name);
  if (got != names) {
    return absl::InvalidArgumentError(absl::StrCat("the ", OptimizerName(options_.kind), " optimizer's state is ",
                                                   absl::StrJoin(names, ", "), "; the checkpoint has ",
                                                   got.empty() ? "none" : absl::StrJoin(got, ", ")));
  }
  for (const auto& [name, values] : state) {
    if (values == nullptr || values->size() != weights.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " buffer size mismatch"));
    }
    if (!AllFinite(*values)) return absl::InvalidArgumentError(absl::StrCat(name, " buffer contains NaN or Inf"));
  }
  for (const char* name : RuleOf(options_.kind).scalars) {
    auto it = scalars.find(name);
    if (it == scalars.end() || it->second.size() != group_count() ||
        !std::all_of(it->second.begin(), it->second.end(), [](double x) { return std::isfinite(x); })) {
      return absl::InvalidArgumentError(absl::StrCat("the checkpoint lacks the ", OptimizerName(options_.kind),
                                                     " optimizer's ", name, " for its ", group_count(), " groups"));
    }
  }
  if (scalars.size() != RuleOf(options_.kind).scalars.size()) {
    return absl::InvalidArgumentError("the checkpoint has optimizer scalars this optimizer does not keep");
  }
  if (!group_rates.empty()) {
    if (absl::Status s = SetGroupRates(group_rates); !s.ok()) return s;
  }
  if (absl::Status s = Initialize(std::move(layout), std::move(weights), version); !s.ok()) return s;
  for (size_t i = 0; i < state.size(); ++i) *state_[i] = *state[i].second;
  scalars_ = scalars;
  if (adam_time >= 0) adam_time_ = adam_time;
  return absl::OkStatus();
}

}  // namespace server
}  // namespace omnilearn
