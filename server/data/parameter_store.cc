#include "server/data/parameter_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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

// The step's kernels over [lo, hi) of one tensor. Free functions with restrict
// parameters and scalars by value, so that GCC vectorizes them (inside a lambda that
// captures the scalars by reference it cannot: a store might change them).
void BlendRange(float* __restrict out, const float* __restrict w, const float* __restrict u, int64_t lo, int64_t hi,
                float blend, float us) {
  for (int64_t i = lo; i < hi; ++i) out[i] = w[i] + blend * (us * u[i] - w[i]);
}

void SgdRange(float* __restrict out, float* __restrict v, const float* __restrict w, const float* __restrict u,
              int64_t lo, int64_t hi, float mu, float scale, float wd, float lr) {
  for (int64_t i = lo; i < hi; ++i) {
    const float vi = mu * v[i] + scale * u[i] + wd * w[i];
    v[i] = vi;
    out[i] = w[i] - lr * vi;
  }
}

// SGD without momentum (mu = 0 on every step of the job): the velocity would be written
// and never read, so it is not kept: 3 model-sized streams instead of 5.
void PlainSgdRange(float* __restrict out, const float* __restrict w, const float* __restrict u, int64_t lo, int64_t hi,
                   float scale, float wd, float lr) {
  for (int64_t i = lo; i < hi; ++i) out[i] = w[i] - lr * (scale * u[i] + wd * w[i]);
}

struct AdamScalars {
  float scale, lr, wd, b1, b2, eps, bias2_sqrt, step_size;
  bool decoupled;
};

void AdamRange(float* __restrict out, float* __restrict m, float* __restrict v, const float* __restrict w,
               const float* __restrict u, int64_t lo, int64_t hi, const AdamScalars k) {
  for (int64_t i = lo; i < hi; ++i) {
    float g = k.scale * u[i];
    float wi = w[i];
    if (k.decoupled) {
      wi *= 1 - k.lr * k.wd;
    } else {
      g += k.wd * wi;
    }
    m[i] = k.b1 * m[i] + (1 - k.b1) * g;
    v[i] = k.b2 * v[i] + (1 - k.b2) * g * g;
    out[i] = wi - k.step_size * m[i] / (std::sqrt(v[i]) / k.bias2_sqrt + k.eps);
  }
}

// A step's scalars: the rate, decay, momentum and blend it runs with, and Adam's.
struct StepScalars {
  float lr = 0, wd = 0, scale = 0, us = 0, mu = 0, blend = 0;
  bool velocity = false;  // SGD keeps a velocity (momentum configured, or this step's)
  AdamScalars adam{};
};

// `lr`: the rate after the schedule and the step's scale; `time`: Adam's count after this
// step, in global batches (1 first in sync); `share`: the step's part of a global batch
// (Apply's square-root rule); `scale`: the update's scale after clipping.
StepScalars ScalarsOf(const OptimizerOptions& o, double lr, double time, double share, const StepSettings& step,
                      float scale) {
  // Adam's first moment: the step's `momentum` when given (the async rule lowers beta1
  // as it lowers SGD's momentum), per global batch; a push of share f decays it by ^f.
  const double beta1 = o.kind != OptimizerKind::kSgd && step.momentum.has_value() ? *step.momentum : o.beta1;
  const float b1 = static_cast<float>(std::pow(beta1, share)), b2 = static_cast<float>(std::pow(o.beta2, share));
  const float eps = static_cast<float>(o.eps / std::sqrt(share));
  const float bias1 = static_cast<float>(1 - std::pow(beta1, time));
  const float bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(o.beta2, time)));
  StepScalars k;
  k.lr = static_cast<float>(lr);
  k.wd = static_cast<float>(o.weight_decay);
  k.scale = scale;
  k.us = static_cast<float>(step.update_scale);
  k.mu = static_cast<float>(step.momentum.value_or(o.momentum));
  k.blend = static_cast<float>(step.buffer_blend);
  // A step's momentum is at most the configured one (the async rule only damps it).
  k.velocity = o.momentum != 0 || k.mu != 0;
  const float step_size = static_cast<float>(lr / std::sqrt(share)) / bias1;
  k.adam = AdamScalars{scale, k.lr, k.wd, b1, b2, eps, bias2_sqrt, step_size, o.kind == OptimizerKind::kAdamW};
  return k;
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

// Tensor t's elements within the flat range [begin, end): the optimizer's step (a buffer's
// blend) from the snapshot `weights` into `next`; `m` and `v` the optimizer's state.
void StepRange(const ModelLayout& layout, OptimizerKind kind, int t, int64_t begin, int64_t end, const StepScalars& k,
               const float* weights, const float* update, float* next, float* m, float* v) {
  const auto [off, lo, hi] = TensorPart(layout, t, begin, end);
  if (lo >= hi) return;
  const float* w = weights + off;
  float* out = next + off;
  const float* u = update + off;
  if (layout.is_buffer(t)) {
    BlendRange(out, w, u, lo, hi, k.blend, k.us);
  } else if (kind == OptimizerKind::kSgd && !k.velocity) {
    PlainSgdRange(out, w, u, lo, hi, k.scale, k.wd, k.lr);
  } else if (kind == OptimizerKind::kSgd) {
    SgdRange(out, m + off, w, u, lo, hi, k.mu, k.scale, k.wd, k.lr);
  } else {
    AdamRange(out, m + off, v + off, w, u, lo, hi, k.adam);
  }
}

}  // namespace

absl::StatusOr<OptimizerKind> ParseOptimizer(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "sgd") return OptimizerKind::kSgd;
  if (n == "adam") return OptimizerKind::kAdam;
  if (n == "adamw") return OptimizerKind::kAdamW;
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", name, "' (want sgd, adam or adamw)"));
}

std::string OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kAdamW:
      return "adamw";
  }
  return "unknown";
}

absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "constant") return LrSchedule::kConstant;
  if (n == "step") return LrSchedule::kStep;
  if (n == "cosine") return LrSchedule::kCosine;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown learning-rate schedule '", name, "' (want constant, step or cosine)"));
}

absl::Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  auto bad = [](absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat("optimizer: ", what)); };
  if (!(o.learning_rate > 0 && std::isfinite(o.learning_rate))) return bad("the learning rate must be > 0");
  if (!(o.momentum >= 0 && o.momentum < 1)) return bad("momentum must be in [0, 1)");
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) return bad("weight decay must be >= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1)) return bad("betas must be in [0, 1)");
  if (!(o.eps > 0 && std::isfinite(o.eps))) return bad("eps must be > 0");
  if (!(o.clip_grad_norm >= 0 && std::isfinite(o.clip_grad_norm))) return bad("the clipping norm must be >= 0");
  if (!(o.lr_decay_epochs >= 0)) return bad("lr_decay_epochs must be >= 0");
  for (size_t g = 0; g < o.groups.size(); ++g) {
    if (!(o.groups[g].lr > 0 && std::isfinite(o.groups[g].lr))) {
      return bad(absl::StrCat("param group ", g, "'s learning rate must be > 0"));
    }
    if (!(o.groups[g].weight_decay >= 0 && std::isfinite(o.groups[g].weight_decay))) {
      return bad(absl::StrCat("param group ", g, "'s weight decay must be >= 0"));
    }
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
  std::string out;
  if (o.kind == OptimizerKind::kSgd) {
    out = absl::StrCat("SGD(lr=", o.learning_rate, ", momentum=", o.momentum, ", weight_decay=", o.weight_decay, ")");
  } else {
    out = absl::StrCat(o.kind == OptimizerKind::kAdam ? "Adam" : "AdamW", "(lr=", o.learning_rate, ", betas=(", o.beta1,
                       ", ", o.beta2, "), eps=", o.eps, ", weight_decay=", o.weight_decay, ")");
  }
  for (size_t g = 0; g < o.groups.size(); ++g) {
    absl::StrAppend(&out, g == 0 ? ", param groups: " : "; ", g, ": ", o.groups[g].tensors.size(),
                    " tensors lr=", o.groups[g].lr, " weight_decay=", o.groups[g].weight_decay);
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

std::vector<std::string> ParameterStore::StateNames() const {
  if (options_.kind == OptimizerKind::kSgd) return {"momentum"};
  return {"exp_avg", "exp_avg_sq"};
}

absl::Status ParameterStore::Initialize(ModelLayout layout, std::vector<float> values, uint64_t version) {
  if (initialized()) return absl::FailedPreconditionError("the model is already initialized");
  if (static_cast<int64_t>(values.size()) != layout.total_elements()) {
    return absl::InvalidArgumentError(
        absl::StrCat("initial parameters have ", values.size(), " values, the layout needs ", layout.total_elements()));
  }
  if (!AllFinite(values)) return absl::InvalidArgumentError("initial parameters contain NaN or Inf");
  if (absl::Status s = AssignGroups(layout); !s.ok()) return s;
  layout_ = std::move(layout);
  state_.clear();
  for (size_t i = 0; i < StateNames().size(); ++i)
    state_.push_back(std::make_shared<std::vector<float>>(values.size()));
  state_buffers_.assign(state_.size(), SharedBuffers());
  weights_ = std::make_shared<std::vector<float>>(std::move(values));  // not const: retired as spare_ later
  spare_.reset();
  snapshots_.Clear();
  served_.reset();
  predictions_.Clear();
  version_ = version;
  adam_time_ = static_cast<double>(version);
  return absl::OkStatus();
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
  const int tensors = static_cast<int>(layout_.tensors().size());
  const double share = step.sample_share > 0 ? std::min(step.sample_share, 1.0) : 1.0;
  const float clipped = ClippedScale(update, step.update_scale, step.norm_squared);
  std::vector<StepScalars> ks;  // per param group
  for (size_t g = 0; g < group_count(); ++g) {
    const double rate = step.learning_rate ? *step.learning_rate : GroupRate(g) * step.lr_scale;
    ks.push_back(ScalarsOf(options_, rate, adam_time_ + share, share, step, clipped));
    if (!options_.groups.empty())
      ks.back().wd = ks.back().adam.wd = static_cast<float>(options_.groups[g].weight_decay);
  }
  // The new snapshot is written straight from the old one (no copy first), into one a
  // reader let go of (an in-memory checkpoint holds its version across rounds).
  snapshots_.Retire(std::move(spare_));
  std::shared_ptr<std::vector<float>> next = snapshots_.Take(weights_->size());
  std::vector<const float*> copy_from;
  DetachHeldState(&copy_from);
  float* const m = state_.empty() ? nullptr : state_[0]->data();
  float* const v = state_.size() < 2 ? nullptr : state_[1]->data();
  // Element-wise: split across cores by ranges of the flat model (ParallelFor).
  ParallelFor(layout_.total_elements(), kStepGrain, [&](int64_t begin, int64_t end) {
    for (size_t i = 0; i < state_.size(); ++i) {
      if (copy_from[i] != nullptr) {
        std::memcpy(state_[i]->data() + begin, copy_from[i] + begin, (end - begin) * sizeof(float));
      }
    }
    for (int t = 0; t < tensors; ++t) {
      StepRange(layout_, options_.kind, t, begin, end, ks[group_of_[t]], weights_->data(), update.data(), next->data(),
                m, v);
    }
  });
  spare_ = std::const_pointer_cast<std::vector<float>>(std::move(weights_));
  weights_ = std::move(next);
  ++version_;
  adam_time_ += share;
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
                                     uint64_t version, double adam_time) {
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
  if (absl::Status s = Initialize(std::move(layout), std::move(weights), version); !s.ok()) return s;
  for (size_t i = 0; i < state.size(); ++i) *state_[i] = *state[i].second;
  if (adam_time >= 0) adam_time_ = adam_time;
  return absl::OkStatus();
}

}  // namespace server
}  // namespace omnilearn
