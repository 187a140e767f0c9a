#include "server/data/optimizer_steps.h"

#include <algorithm>
#include <cmath>

#include "server/data/newton_schulz.h"

namespace omnilearn {
namespace server {
namespace {

double At(const HyperValues& h, Hp hp) { return h[static_cast<int>(hp)]; }

// The kernels over [lo, hi) of one tensor. Free functions with restrict parameters and the
// coefficients by value, so that GCC vectorizes the common ones (SGD, Adam).
void SgdRange(float* __restrict out, float* __restrict v, const float* __restrict w, const float* __restrict u,
              int64_t lo, int64_t hi, const StepCoefficients k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i] + k.wd * w[i];
    const float vi = k.momentum * v[i] + k.damp * g;
    v[i] = vi;
    out[i] = w[i] - k.lr * (k.nesterov ? g + k.momentum * vi : vi);
  }
}

// SGD without momentum (none on every step of the job): no velocity is kept.
void PlainSgdRange(float* __restrict out, const float* __restrict w, const float* __restrict u, int64_t lo, int64_t hi,
                   const StepCoefficients k) {
  for (int64_t i = lo; i < hi; ++i) out[i] = w[i] - k.lr * (k.scale * u[i] + k.wd * w[i]);
}

// torch's lerp: a + w (b - a), computed from b's side for w >= 0.5.
inline float Lerp(float a, float b, float w) { return w < 0.5f ? a + w * (b - a) : b - (b - a) * (1 - w); }

// The gradient with L2 decay, and the weights with decoupled decay, as the Adam family
// takes them.
struct Decayed {
  float g, w;
};
inline Decayed Decay(const StepCoefficients& k, float w, float u) {
  const float g = k.scale * u;
  if (k.decoupled) return {g, w * k.keep};
  return {g + k.wd * w, w};
}

void AdamRange(float* __restrict out, float* __restrict m, float* __restrict v, float* __restrict vmax,
               const float* __restrict w, const float* __restrict u, int64_t lo, int64_t hi, const StepCoefficients k) {
  for (int64_t i = lo; i < hi; ++i) {
    const auto [g, wi] = Decay(k, w[i], u[i]);
    m[i] = Lerp(m[i], g, k.one_minus_beta1);
    v[i] = k.beta2 * v[i] + k.one_minus_beta2 * g * g;
    float second = v[i];
    if (k.amsgrad) second = vmax[i] = std::max(vmax[i], v[i]);
    out[i] = wi - k.step_size * m[i] / (std::sqrt(second) / k.bias2_sqrt + k.eps);
  }
}

void AdadeltaRange(float* out, float* sq, float* acc, const float* w, const float* u, int64_t lo, int64_t hi,
                   const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i] + k.wd * w[i];
    sq[i] = sq[i] * k.beta1 + k.one_minus_beta1 * g * g;  // rho
    const float delta = std::sqrt(acc[i] + k.eps) / std::sqrt(sq[i] + k.eps) * g;
    acc[i] = acc[i] * k.beta1 + k.one_minus_beta1 * delta * delta;
    out[i] = w[i] - k.lr * delta;
  }
}

void AdagradRange(float* out, float* sum, const float* w, const float* u, int64_t lo, int64_t hi,
                  const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i] + k.wd * w[i];
    sum[i] += g * g;
    out[i] = w[i] - k.step_size * g / (std::sqrt(sum[i]) + k.eps);
  }
}

void AdamaxRange(float* out, float* m, float* inf, const float* w, const float* u, int64_t lo, int64_t hi,
                 const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i] + k.wd * w[i];
    m[i] = Lerp(m[i], g, k.one_minus_beta1);
    inf[i] = std::max(inf[i] * k.beta2, std::abs(g) + k.eps);
    out[i] = w[i] - k.step_size * m[i] / inf[i];
  }
}

void NAdamRange(float* out, float* m, float* v, const float* w, const float* u, int64_t lo, int64_t hi,
                const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const auto [g, wi] = Decay(k, w[i], u[i]);
    m[i] = Lerp(m[i], g, k.one_minus_beta1);
    v[i] = v[i] * k.beta2 + k.one_minus_beta2 * g * g;
    const float denom = std::sqrt(v[i] / k.bias2) + k.eps;
    const float after_grad = wi + k.c_grad * g / denom;
    out[i] = after_grad + k.c_avg * m[i] / denom;
  }
}

void RAdamRange(float* out, float* m, float* v, const float* w, const float* u, int64_t lo, int64_t hi,
                const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const auto [g, wi] = Decay(k, w[i], u[i]);
    m[i] = Lerp(m[i], g, k.one_minus_beta1);
    v[i] = v[i] * k.beta2 + k.one_minus_beta2 * g * g;
    const float corrected = m[i] / k.c_avg;  // c_avg: bias1
    if (k.rectified) {
      const float adaptive = k.bias2_sqrt / (std::sqrt(v[i]) + k.eps);
      out[i] = wi - corrected * k.lr * adaptive * k.step_size;  // step_size: the rectification
    } else {
      out[i] = wi - corrected * k.lr;
    }
  }
}

void RMSpropRange(float* out, float* sq, float* buf, float* gavg, const float* w, const float* u, int64_t lo,
                  int64_t hi, const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i] + k.wd * w[i];
    sq[i] = sq[i] * k.beta2 + k.one_minus_beta2 * g * g;  // alpha
    float avg;
    if (k.centered) {
      gavg[i] = Lerp(gavg[i], g, k.one_minus_beta2);
      avg = std::sqrt(sq[i] - gavg[i] * gavg[i]) + k.eps;
    } else {
      avg = std::sqrt(sq[i]) + k.eps;
    }
    if (k.momentum > 0) {
      buf[i] = buf[i] * k.momentum + g / avg;
      out[i] = w[i] - k.lr * buf[i];
    } else {
      out[i] = w[i] - k.lr * g / avg;
    }
  }
}

void RpropRange(float* out, float* prev, float* size, const float* w, const float* u, int64_t lo, int64_t hi,
                const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    float g = k.scale * u[i];
    if (k.first) size[i] = k.lr;
    const float product = g * prev[i];
    const float factor = product > 0 ? k.etaplus : product < 0 ? k.etaminus : 1.0f;
    size[i] = std::clamp(size[i] * factor, k.step_min, k.step_max);
    if (product < 0) g = 0;
    const float sign = g > 0 ? 1.0f : g < 0 ? -1.0f : 0.0f;
    out[i] = w[i] - sign * size[i];
    prev[i] = g;
  }
}

void AsgdRange(float* out, float* ax, const float* w, const float* u, int64_t lo, int64_t hi,
               const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i] + k.wd * w[i];
    const float wi = w[i] * k.keep - k.eta * g;
    out[i] = wi;
    ax[i] = k.average == 1 ? wi : ax[i] + (wi - ax[i]) * k.average;
  }
}

// Keras's decoupled decay, as it writes it for every optimizer: w - w * wd * lr, at the
// step's rate without the square-root rule (linear in the samples).
inline float KerasDecay(float w, const StepCoefficients& k) { return w - w * k.wd * k.linear_lr; }

// Keras's forms (Hp::kKeras), each as keras/src/optimizers writes its update_step; the
// decoupled decay (Keras's for every optimizer) first. Adam: step_size is Keras's alpha.
void KerasAdamRange(float* out, float* m, float* v, float* vmax, const float* w, const float* u, int64_t lo, int64_t hi,
                    const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i];
    m[i] += (g - m[i]) * k.one_minus_beta1;
    v[i] += (g * g - v[i]) * k.one_minus_beta2;
    float second = v[i];
    if (k.amsgrad) second = vmax[i] = std::max(vmax[i], v[i]);
    out[i] = KerasDecay(w[i], k) - m[i] * k.step_size / (std::sqrt(second) + k.eps);
  }
}

void KerasAdagradRange(float* out, float* sum, const float* w, const float* u, int64_t lo, int64_t hi,
                       const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i];
    sum[i] += g * g;
    out[i] = KerasDecay(w[i], k) - k.lr * g / std::sqrt(sum[i] + k.eps);
  }
}

void KerasRMSpropRange(float* out, float* sq, float* buf, float* gavg, const float* w, const float* u, int64_t lo,
                       int64_t hi, const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i];
    sq[i] = k.beta2 * sq[i] + k.one_minus_beta2 * (g * g);  // rho
    float denominator = sq[i] + k.eps;
    if (k.centered) {
      gavg[i] = k.beta2 * gavg[i] + k.one_minus_beta2 * g;
      denominator = sq[i] - gavg[i] * gavg[i] + k.eps;
    }
    const float increment = k.lr * g / std::sqrt(denominator);
    if (k.momentum > 0) {
      buf[i] = k.momentum * buf[i] + increment;
      out[i] = KerasDecay(w[i], k) - buf[i];
    } else {
      out[i] = KerasDecay(w[i], k) - increment;
    }
  }
}

void KerasAdamaxRange(float* out, float* m, float* inf, const float* w, const float* u, int64_t lo, int64_t hi,
                      const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i];
    m[i] += (g - m[i]) * k.one_minus_beta1;
    inf[i] = std::max(k.beta2 * inf[i], std::abs(g));
    out[i] = KerasDecay(w[i], k) - k.lr * m[i] / (k.c_avg * (inf[i] + k.eps));  // c_avg: 1 - beta1^t
  }
}

void KerasNAdamRange(float* out, float* m, float* v, const float* w, const float* u, int64_t lo, int64_t hi,
                     const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i];
    m[i] += (g - m[i]) * k.one_minus_beta1;
    v[i] += (g * g - v[i]) * k.one_minus_beta2;
    const float m_hat = k.u_next * m[i] / k.product_next_gap + k.one_minus_u * g / k.product_gap;
    out[i] = KerasDecay(w[i], k) - m_hat * k.lr / (std::sqrt(v[i] / k.bias2) + k.eps);
  }
}

// Keras's scalars, in float32 as Keras works them out (its decay: KerasDecay).
void PrepareKeras(OptimizerKind kind, const GroupStepInput& in, StepCoefficients* k) {
  const float t = static_cast<float>(in.time);
  if (kind == OptimizerKind::kAdam || kind == OptimizerKind::kAdamW || kind == OptimizerKind::kMuon) {
    k->step_size = k->lr * std::sqrt(1 - std::pow(k->beta2, t)) / (1 - std::pow(k->beta1, t));
  } else if (kind == OptimizerKind::kAdamax) {
    k->c_avg = 1 - std::pow(k->beta1, t);
  } else if (kind == OptimizerKind::kAdafactor) {
    k->beta2 = 1 - std::pow(t, k->beta2);  // beta2: beta2_decay here (PrepareOthers)
    k->one_minus_beta2 = 1 - k->beta2;
    k->rho = std::min(k->linear_lr, 1 / std::sqrt(t));
  }
}

// Lion: the sign of the momentum's interpolation toward the gradient, decoupled decay first.
void LionRange(float* out, float* m, const float* w, const float* u, int64_t lo, int64_t hi,
               const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i];
    const float c = m[i] * k.beta1 + g * k.one_minus_beta1;
    const float sign = c > 0 ? 1.0f : c < 0 ? -1.0f : 0.0f;
    out[i] = KerasDecay(w[i], k) - k.lr * sign;
    m[i] = m[i] * k.beta2 + g * k.one_minus_beta2;
  }
}

// Keras's SGD: the rate inside the velocity (v <- momentum v - lr g), the decay decoupled.
void KerasSgdRange(float* out, float* v, const float* w, const float* u, int64_t lo, int64_t hi,
                   const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i], wi = KerasDecay(w[i], k);
    if (!k.velocity) {
      out[i] = wi - g * k.lr;
      continue;
    }
    v[i] = v[i] * k.momentum - g * k.lr;
    out[i] = k.nesterov ? wi + (v[i] * k.momentum - g * k.lr) : wi + v[i];
  }
}

// Keras's Adadelta: torch's step with Keras's order of operations, the decay decoupled.
void KerasAdadeltaRange(float* out, float* sq, float* acc, const float* w, const float* u, int64_t lo, int64_t hi,
                        const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float g = k.scale * u[i];
    sq[i] = k.beta1 * sq[i] + k.one_minus_beta1 * (g * g);  // rho
    const float delta = -(std::sqrt(acc[i] + k.eps) * g / std::sqrt(sq[i] + k.eps));
    acc[i] = k.beta1 * acc[i] + k.one_minus_beta1 * (delta * delta);
    out[i] = KerasDecay(w[i], k) + k.lr * delta;
  }
}

// Keras's Ftrl: the accumulated squares set each weight's rate, the linear term gathers the
// gradients, and the weight is the proximal point of both (0 inside the L1 ball).
void FtrlRange(float* out, float* acc, float* linear, const float* w, const float* u, int64_t lo, int64_t hi,
               const StepCoefficients& k) {
  for (int64_t i = lo; i < hi; ++i) {
    const float wi = KerasDecay(w[i], k), g = k.scale * u[i];
    const float next = acc[i] + g * g;
    const float rate_next = std::pow(next, k.power), rate_now = std::pow(acc[i], k.power);
    linear[i] += (g + k.shrinkage_twice * wi) - (rate_next - rate_now) / k.lr * wi;
    const float quadratic = rate_next / k.lr + k.l2_twice;
    out[i] = (std::clamp(linear[i], -k.l1, k.l1) - linear[i]) / quadratic;
    acc[i] = next;
  }
}

// The moving averages' decays and their complements, each worked out in double and
// rounded once, as torch passes a Python scalar to its kernels.
void SetDecays(double beta1, double beta2, StepCoefficients* k) {
  k->beta1 = static_cast<float>(beta1);
  k->beta2 = static_cast<float>(beta2);
  k->one_minus_beta1 = static_cast<float>(1 - beta1);
  k->one_minus_beta2 = static_cast<float>(1 - beta2);
}

// The Adam family's scalars (Adam, AdamW, Adamax, NAdam, RAdam): decays, eps and the rate
// under the square-root rule for a share of the batch.
void AdamFamily(const HyperValues& h, const GroupStepInput& in, double beta1, StepCoefficients* k) {
  SetDecays(std::pow(beta1, in.share), std::pow(At(h, Hp::kBeta2), in.share), k);
  k->eps = static_cast<float>(At(h, Hp::kEps) / std::sqrt(in.share));
  k->amsgrad = At(h, Hp::kAmsgrad) != 0;
}

// Keras's Nadam: its momentum schedule 0.96^t, every scalar in float32 (its u_product too).
void PrepareKerasNAdam(const HyperValues& h, const GroupStepInput& in, double beta1, std::vector<double>* scalars,
                       StepCoefficients* k) {
  const float t = static_cast<float>(in.time), b1 = static_cast<float>(beta1),
              b2 = static_cast<float>(At(h, Hp::kBeta2));
  const float u = b1 * (1.0f - 0.5f * std::pow(0.96f, t));
  k->u_next = b1 * (1.0f - 0.5f * std::pow(0.96f, t + 1));
  const float product = static_cast<float>((*scalars)[0]) * b1 * (1.0f - 0.5f * std::pow(0.96f, t));
  (*scalars)[0] = product;
  k->one_minus_u = 1 - u;
  k->product_gap = 1 - product;
  k->product_next_gap = 1 - product * k->u_next;
  k->one_minus_beta1 = 1 - b1;
  k->one_minus_beta2 = 1 - b2;
  k->bias2 = 1 - std::pow(b2, t);
}

void PrepareNAdam(const HyperValues& h, const GroupStepInput& in, double lr, double beta1, std::vector<double>* scalars,
                  StepCoefficients* k) {
  if (At(h, Hp::kKeras) != 0) return PrepareKerasNAdam(h, in, beta1, scalars, k);
  const double md = At(h, Hp::kMomentumDecay), t = in.time;
  const double mu = beta1 * (1.0 - 0.5 * std::pow(0.96, t * md));
  const double mu_next = beta1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * md));
  // torch keeps mu_product as a float32 tensor.
  const double product = static_cast<float>((*scalars)[0] * mu);
  (*scalars)[0] = product;
  const double product_next = product * mu_next;
  k->bias2 = static_cast<float>(1 - std::pow(At(h, Hp::kBeta2), t));
  k->c_grad = static_cast<float>(-lr * (1.0 - mu) / (1.0 - product));
  k->c_avg = static_cast<float>(-lr * mu_next / (1.0 - product_next));
}

void PrepareRAdam(const HyperValues& h, double t, StepCoefficients* k) {
  const double beta1 = At(h, Hp::kBeta1), beta2 = At(h, Hp::kBeta2);
  const double bias1 = 1 - std::pow(beta1, t), bias2 = 1 - std::pow(beta2, t);
  const double rho_inf = 2 / (1 - beta2) - 1;
  const double rho_t = rho_inf - 2 * t * std::pow(beta2, t) / bias2;
  k->c_avg = static_cast<float>(bias1);
  k->rectified = rho_t > 5.0;
  k->bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  if (k->rectified) {
    k->step_size =
        static_cast<float>(std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)));
  }
}

void PrepareAsgd(const HyperValues& h, const GroupStepInput& in, std::vector<double>* scalars, StepCoefficients* k) {
  double& eta = (*scalars)[0];  // 0: the first step's, the group's rate
  if (eta == 0) eta = in.lr;
  k->eta = static_cast<float>(eta);
  k->keep = static_cast<float>(1 - At(h, Hp::kLambd) * k->eta);
  const double t0 = At(h, Hp::kT0), before = in.time - in.share;
  k->average = static_cast<float>(1 / std::max(1.0, before - t0));  // torch's mu, from the step before
  // The next step's, a float32 tensor in torch.
  eta = static_cast<float>(in.lr / std::pow(1 + At(h, Hp::kLambd) * in.lr * in.time, At(h, Hp::kAlpha)));
}

}  // namespace

// The Adam family's step (Adam, AdamW, Adamax, NAdam, RAdam) after the coefficients all share.
void PrepareAdamFamily(OptimizerKind kind, const HyperValues& h, const GroupStepInput& in, double lr, double momentum,
                       std::vector<double>* scalars, StepCoefficients* k) {
  AdamFamily(h, in, momentum, k);
  const double t = in.time;
  switch (kind) {
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdam:
      k->decoupled = kind == OptimizerKind::kAdamW;
      k->step_size = static_cast<float>(lr / (1 - std::pow(momentum, t)));
      k->bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(At(h, Hp::kBeta2), t)));
      return;
    case OptimizerKind::kAdamax:
      k->step_size = static_cast<float>(lr / (1 - std::pow(momentum, t)));
      return;
    case OptimizerKind::kNAdam:
      k->decoupled = At(h, Hp::kDecoupledWeightDecay) != 0;
      PrepareNAdam(h, in, lr, momentum, scalars, k);
      return;
    case OptimizerKind::kRAdam:
      k->decoupled = At(h, Hp::kDecoupledWeightDecay) != 0;
      PrepareRAdam(h, t, k);
      return;
    default:
      return;
  }
}

// Rprop, Lion, Lamb, Adafactor, Ftrl and Muon: their scalars.
void PrepareOthers(OptimizerKind kind, const HyperValues& h, const GroupStepInput& in, double lr, double momentum,
                   StepCoefficients* k) {
  const double t = in.time;
  switch (kind) {
    case OptimizerKind::kRprop:
      k->etaminus = static_cast<float>(At(h, Hp::kEtaMinus));
      k->etaplus = static_cast<float>(At(h, Hp::kEtaPlus));
      k->step_min = static_cast<float>(At(h, Hp::kStepSizeMin));
      k->step_max = static_cast<float>(At(h, Hp::kStepSizeMax));
      return;
    case OptimizerKind::kLion:
      return SetDecays(momentum, At(h, Hp::kBeta2), k);
    case OptimizerKind::kLamb:  // Keras's: its bias corrections in float32
      SetDecays(momentum, At(h, Hp::kBeta2), k);
      k->eps = static_cast<float>(At(h, Hp::kEps));
      k->c_avg = 1 - std::pow(k->beta1, static_cast<float>(t));
      k->bias2 = 1 - std::pow(k->beta2, static_cast<float>(t));
      return;
    case OptimizerKind::kAdafactor:
      k->beta2 = static_cast<float>(At(h, Hp::kBeta2Decay));  // Keras's form works its beta2_t from it
      k->one_minus_beta2 = static_cast<float>(std::pow(t, At(h, Hp::kBeta2Decay)));
      k->rho = static_cast<float>(std::min(lr, 1 / std::sqrt(t)));
      k->eps1 = static_cast<float>(At(h, Hp::kEps1));
      k->eps2 = static_cast<float>(At(h, Hp::kEps2));
      k->d = static_cast<float>(At(h, Hp::kD));
      return;
    case OptimizerKind::kFtrl: {  // Keras's, its scalars in float32
      k->power = static_cast<float>(-At(h, Hp::kLearningRatePower));
      k->l1 = static_cast<float>(At(h, Hp::kL1));
      const float l2 = static_cast<float>(At(h, Hp::kL2)) + static_cast<float>(At(h, Hp::kBeta)) / (2.0f * k->lr);
      k->l2_twice = 2 * l2;
      k->shrinkage_twice = static_cast<float>(2 * At(h, Hp::kL2Shrinkage));
      return;
    }
    case OptimizerKind::kMuon:
      k->momentum = static_cast<float>(momentum);
      k->one_minus_beta1 = static_cast<float>(1 - momentum);
      k->nesterov = At(h, Hp::kNesterov) != 0;
      k->eps = static_cast<float>(At(h, Hp::kEps));
      k->ns_a = static_cast<float>(At(h, Hp::kNsA));
      k->ns_b = static_cast<float>(At(h, Hp::kNsB));
      k->ns_c = static_cast<float>(At(h, Hp::kNsC));
      k->ns_steps = static_cast<int>(At(h, Hp::kNsSteps));
      k->adjust_lr_fn = static_cast<int>(At(h, Hp::kAdjustLrFn));
      k->rms_rate = static_cast<float>(At(h, Hp::kRmsRate));
      k->adamw = At(h, Hp::kAdamW) != 0;
      if (k->adamw && k->keras) SetDecays(At(h, Hp::kBeta1), At(h, Hp::kBeta2), k);  // the rest: PrepareKeras
      if (k->adamw && !k->keras) PrepareAdamFamily(OptimizerKind::kAdamW, h, in, lr, At(h, Hp::kBeta1), nullptr, k);
      return;
    default:
      return;
  }
}

std::vector<std::string> StateRoles(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    case OptimizerKind::kRMSprop:
      return {"square_avg", "momentum_buffer", "grad_avg"};
    case OptimizerKind::kMuon:
      return {"momentum_buffer", "exp_avg_sq"};
    default:
      return StateNames(kind, {});
  }
}

float InitialState(OptimizerKind kind, const std::string& name, const HyperValues& h) {
  if ((kind == OptimizerKind::kAdagrad && name == "sum") || (kind == OptimizerKind::kFtrl && name == "accumulator")) {
    return static_cast<float>(At(h, Hp::kInitialAccumulatorValue));
  }
  return 0;
}

StepCoefficients PrepareStep(OptimizerKind kind, const HyperValues& h, const GroupStepInput& in,
                             std::vector<double>* scalars) {
  const OptimizerRule& rule = RuleOf(kind);
  StepCoefficients k;
  k.kind = kind;
  k.scale = At(h, Hp::kMaximize) != 0 ? -in.scale : in.scale;
  // The adaptive rules move by sqrt(share) of a step (the rate carries share itself).
  const double lr = rule.adaptive ? in.lr / std::sqrt(in.share) : in.lr;
  k.lr = static_cast<float>(lr);
  k.wd = static_cast<float>(std::max(in.wd, 0.0));
  k.first = in.time - in.share <= 0;
  k.keep = static_cast<float>(1 - in.lr * k.wd);  // decoupled decay: linear in the samples
  k.linear_lr = static_cast<float>(in.lr);
  k.keras = At(h, Hp::kKeras) != 0;
  const double configured = rule.momentum ? At(h, *rule.momentum) : 0;
  const double momentum = in.momentum.value_or(configured);
  const double t = in.time;
  switch (kind) {
    case OptimizerKind::kSgd:
      k.momentum = static_cast<float>(momentum);
      k.damp = static_cast<float>(k.first ? 1.0 : 1.0 - At(h, Hp::kDampening));
      k.nesterov = At(h, Hp::kNesterov) != 0;
      k.velocity = configured != 0 || momentum != 0;
      break;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
    case OptimizerKind::kAdamax:
    case OptimizerKind::kNAdam:
    case OptimizerKind::kRAdam:
      PrepareAdamFamily(kind, h, in, lr, momentum, scalars, &k);
      break;
    case OptimizerKind::kAdadelta:
      SetDecays(std::pow(At(h, Hp::kRho), in.share), 0, &k);
      k.eps = static_cast<float>(At(h, Hp::kEps));
      break;
    case OptimizerKind::kAdagrad:
      k.eps = static_cast<float>(At(h, Hp::kEps) / std::sqrt(in.share));
      k.step_size = static_cast<float>(lr / (1 + (t - 1) * At(h, Hp::kLrDecay)));
      break;
    case OptimizerKind::kRMSprop:
      SetDecays(0, std::pow(At(h, Hp::kAlpha), in.share), &k);
      k.eps = static_cast<float>(At(h, Hp::kEps) / std::sqrt(in.share));
      k.momentum = static_cast<float>(momentum);
      k.centered = At(h, Hp::kCentered) != 0;
      break;
    case OptimizerKind::kAsgd:
      PrepareAsgd(h, in, scalars, &k);
      break;
    default:
      PrepareOthers(kind, h, in, lr, momentum, &k);
      break;
  }
  if (k.keras) PrepareKeras(kind, in, &k);
  return k;
}

void StepElements(const StepCoefficients& k, const float* w, const float* u, float* out, const StatePointers& s,
                  int64_t lo, int64_t hi) {
  if (k.keras) {
    switch (k.kind) {
      case OptimizerKind::kAdam:
      case OptimizerKind::kAdamW:
        return KerasAdamRange(out, s[0], s[1], s[2], w, u, lo, hi, k);
      case OptimizerKind::kAdagrad:
        return KerasAdagradRange(out, s[0], w, u, lo, hi, k);
      case OptimizerKind::kRMSprop:
        return KerasRMSpropRange(out, s[0], s[1], s[2], w, u, lo, hi, k);
      case OptimizerKind::kAdamax:
        return KerasAdamaxRange(out, s[0], s[1], w, u, lo, hi, k);
      case OptimizerKind::kNAdam:
        return KerasNAdamRange(out, s[0], s[1], w, u, lo, hi, k);
      case OptimizerKind::kSgd:
        return KerasSgdRange(out, s[0], w, u, lo, hi, k);
      case OptimizerKind::kAdadelta:
        return KerasAdadeltaRange(out, s[0], s[1], w, u, lo, hi, k);
      default:
        break;  // no Keras form: torch's
    }
  }
  switch (k.kind) {
    case OptimizerKind::kSgd:
      if (k.velocity) return SgdRange(out, s[0], w, u, lo, hi, k);
      return PlainSgdRange(out, w, u, lo, hi, k);
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return AdamRange(out, s[0], s[1], s[2], w, u, lo, hi, k);
    case OptimizerKind::kAdadelta:
      return AdadeltaRange(out, s[0], s[1], w, u, lo, hi, k);
    case OptimizerKind::kAdagrad:
      return AdagradRange(out, s[0], w, u, lo, hi, k);
    case OptimizerKind::kAdamax:
      return AdamaxRange(out, s[0], s[1], w, u, lo, hi, k);
    case OptimizerKind::kNAdam:
      return NAdamRange(out, s[0], s[1], w, u, lo, hi, k);
    case OptimizerKind::kRAdam:
      return RAdamRange(out, s[0], s[1], w, u, lo, hi, k);
    case OptimizerKind::kRMSprop:
      return RMSpropRange(out, s[0], s[1], s[2], w, u, lo, hi, k);
    case OptimizerKind::kRprop:
      return RpropRange(out, s[0], s[1], w, u, lo, hi, k);
    case OptimizerKind::kAsgd:
      return AsgdRange(out, s[0], w, u, lo, hi, k);
    case OptimizerKind::kLion:
      return LionRange(out, s[0], w, u, lo, hi, k);
    case OptimizerKind::kFtrl:
      return FtrlRange(out, s[0], s[1], w, u, lo, hi, k);
    case OptimizerKind::kAdafactor:
    case OptimizerKind::kLamb:
    case OptimizerKind::kMuon:
      return;  // whole tensors: StepWholeTensor
  }
}

// Lamb (Keras's): Adam's bias-corrected step, scaled by the tensor's trust ratio |w| / |step|.
void LambTensor(const StepCoefficients& k, int64_t n, const float* w, const float* u, float* out,
                const StatePointers& s) {
  float* m = s[0];
  float* v = s[1];
  std::vector<float> update(n);
  double w_norm = 0, update_norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float g = k.scale * u[i];
    out[i] = KerasDecay(w[i], k);
    m[i] += (g - m[i]) * k.one_minus_beta1;
    v[i] += (g * g - v[i]) * k.one_minus_beta2;
    update[i] = (m[i] / k.c_avg) / (std::sqrt(v[i] / k.bias2) + k.eps);
    w_norm += static_cast<double>(out[i]) * out[i];
    update_norm += static_cast<double>(update[i]) * update[i];
  }
  const float ratio = w_norm > 0 && update_norm > 0
                          ? static_cast<float>(std::sqrt(w_norm)) / static_cast<float>(std::sqrt(update_norm))
                          : 1.0f;
  for (int64_t i = 0; i < n; ++i) out[i] -= ratio * k.lr * update[i];
}

namespace {

double SumOfSquares(const float* x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

// A factored second moment over a tensor's last two dimensions (`batch` matrices of rows x
// cols): each row's and each column's mean of `square(g)`, taken into row_var and col_var
// by `average(old, mean)`.
template <typename Square, typename Average>
void FactoredMoments(int64_t batch, int64_t rows, int64_t cols, const float* u, Square square, Average average,
                     float* row_var, float* col_var) {
  for (int64_t b = 0; b < batch; ++b) {
    const float* g = u + b * rows * cols;
    std::vector<double> col_sum(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double s = square(g[r * cols + c]);
        sum += s;
        col_sum[c] += s;
      }
      float& rv = row_var[b * rows + r];
      rv = average(rv, static_cast<float>(sum / cols));
    }
    for (int64_t c = 0; c < cols; ++c) {
      float& cv = col_var[b * cols + c];
      cv = average(cv, static_cast<float>(col_sum[c] / rows));
    }
  }
}

// Each matrix's estimate of the second moment: row_var x col_var / mean(row_var), floored.
void FactoredUpdate(int64_t batch, int64_t rows, int64_t cols, float scale, const float* u, const float* row_var,
                    const float* col_var, float floor, float row_mean_floor, float* update) {
  for (int64_t b = 0; b < batch; ++b) {
    const float* rv = row_var + b * rows;
    const float* cv = col_var + b * cols;
    double row_sum = 0;
    for (int64_t r = 0; r < rows; ++r) row_sum += rv[r];
    const float row_mean = std::max(static_cast<float>(row_sum / rows), row_mean_floor);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = b * rows * cols + r * cols + c;
        update[i] = scale * u[i] / std::sqrt(std::max(rv[r] * cv[c] / row_mean, floor));
      }
    }
  }
}

// torch's Adafactor (Shazeer and Stern, 2018): row and column moments of a matrix, a
// vector's own; the update's RMS capped at d; the step relative to the weights' RMS.
void AdafactorTensor(const StepCoefficients& k, const std::vector<int64_t>& shape, int64_t n, const float* w,
                     const float* u, float* out, const StatePointers& s) {
  const float alpha =
      std::max(k.eps2, static_cast<float>(std::sqrt(SumOfSquares(w, n)) / std::sqrt(static_cast<double>(n)))) * k.rho;
  std::vector<float> update(n);
  const float floor = k.eps1 * k.eps1;
  if (shape.size() > 1) {
    const int64_t cols = shape.back(), rows = shape[shape.size() - 2], batch = n / (rows * cols);
    const float scale = k.scale, fresh = k.one_minus_beta2;
    FactoredMoments(
        batch, rows, cols, u, [scale](float x) { return static_cast<double>(scale * x) * (scale * x); },
        [fresh](float old, float mean) { return Lerp(old, mean, fresh); }, s[0], s[1]);
    FactoredUpdate(batch, rows, cols, k.scale, u, s[0], s[1], floor, k.eps1, update.data());
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float g = k.scale * u[i];
      s[0][i] = Lerp(s[0][i], g * g, k.one_minus_beta2);
      update[i] = g / std::sqrt(std::max(s[0][i], floor));
    }
  }
  const double denom =
      std::max(1.0, std::sqrt(SumOfSquares(update.data(), n)) / (std::sqrt(static_cast<double>(n)) * k.d));
  const float step = static_cast<float>(alpha / denom);
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * k.keep - step * update[i];
}

// Keras's Adafactor: its moments of g^2 + epsilon_1, no floor, the weights decayed first.
void KerasAdafactorTensor(const StepCoefficients& k, const std::vector<int64_t>& shape, int64_t n, const float* w,
                          const float* u, float* out, const StatePointers& s) {
  for (int64_t i = 0; i < n; ++i) out[i] = KerasDecay(w[i], k);
  const float rms = static_cast<float>(std::sqrt(SumOfSquares(out, n) / static_cast<double>(n)));
  const float alpha = std::max(k.eps2, rms) * k.rho;
  std::vector<float> update(n);
  const float scale = k.scale, eps1 = k.eps1, beta = k.beta2, fresh = k.one_minus_beta2;
  auto regulated = [scale, eps1](float x) { return (scale * x) * (scale * x) + eps1; };
  auto average = [beta, fresh](float old, float mean) { return beta * old + fresh * mean; };
  if (shape.size() >= 2) {
    const int64_t cols = shape.back(), rows = shape[shape.size() - 2], batch = n / (rows * cols);
    FactoredMoments(batch, rows, cols, u, regulated, average, s[0], s[1]);
    FactoredUpdate(batch, rows, cols, k.scale, u, s[0], s[1], 0, 0, update.data());
  } else {
    for (int64_t i = 0; i < n; ++i) {
      s[0][i] = average(s[0][i], regulated(u[i]));
      update[i] = k.scale * u[i] / std::sqrt(s[0][i]);
    }
  }
  const float update_rms = static_cast<float>(std::sqrt(SumOfSquares(update.data(), n) / static_cast<double>(n)));
  const float cap = std::max(1.0f, update_rms / k.d);
  for (int64_t i = 0; i < n; ++i) out[i] -= alpha * (update[i] / cap);
}

// The rate's factor for a rows x cols matrix (torch's _adjust_lr; Keras's lr_adjust is 1).
float MuonRatio(const StepCoefficients& k, int64_t rows, int64_t cols) {
  const double a = static_cast<double>(rows), b = static_cast<double>(cols);
  switch (k.adjust_lr_fn) {
    case 0:
      return static_cast<float>(std::sqrt(std::max(1.0, a / b)));
    case 1:
      return static_cast<float>(k.rms_rate * std::sqrt(std::max(a, b)));
    case 2:
      return static_cast<float>(std::sqrt(a / b));
    default:
      return 1.0f;
  }
}

// Muon: a matrix's momentum (Nesterov's, by default) orthogonalized, at a rate adjusted to
// its shape; torch's momentum is an average (lerp), Keras's a sum (m <- momentum m + g).
// A group of Keras's with adamw steps as Keras's AdamW.
void MuonTensor(const StepCoefficients& k, const std::vector<int64_t>& shape, int64_t n, const float* w, const float* u,
                float* out, const StatePointers& s) {
  if (k.adamw && k.keras) return KerasAdamRange(out, s[0], s[1], nullptr, w, u, 0, n, k);
  if (k.adamw) return AdamRange(out, s[0], s[1], nullptr, w, u, 0, n, k);
  float* m = s[0];
  std::vector<float> update(n);
  for (int64_t i = 0; i < n; ++i) {
    const float g = k.scale * u[i];
    if (k.keras) {
      m[i] += g + m[i] * (k.momentum - 1.0f);
      update[i] = k.nesterov ? g + k.momentum * m[i] : m[i];
    } else {
      m[i] = Lerp(m[i], g, k.one_minus_beta1);
      update[i] = k.nesterov ? Lerp(g, m[i], k.momentum) : m[i];
    }
  }
  NewtonSchulz ns;
  ns.a = k.ns_a, ns.b = k.ns_b, ns.c = k.ns_c, ns.steps = k.ns_steps;
  ns.eps = k.keras ? 1e-7f : k.eps;  // Keras's is fixed
  ns.eps_added = k.keras;
  Orthogonalize(ns, shape[0], shape[1], update.data());
  const float ratio = MuonRatio(k, shape[0], shape[1]);
  if (k.keras) {
    for (int64_t i = 0; i < n; ++i) out[i] = KerasDecay(w[i], k) - k.lr * update[i] * ratio;
    return;
  }
  const float adjusted = k.lr * ratio;
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * k.keep + -adjusted * update[i];
}

}  // namespace

void StepWholeTensor(const StepCoefficients& k, const std::vector<int64_t>& shape, const float* w, const float* u,
                     float* out, const StatePointers& s) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n == 0) return;
  switch (k.kind) {
    case OptimizerKind::kLamb:
      return LambTensor(k, n, w, u, out, s);
    case OptimizerKind::kMuon:
      return MuonTensor(k, shape, n, w, u, out, s);
    case OptimizerKind::kAdafactor:
      if (k.keras) return KerasAdafactorTensor(k, shape, n, w, u, out, s);
      return AdafactorTensor(k, shape, n, w, u, out, s);
    default:
      return;
  }
}

}  // namespace server
}  // namespace omnilearn
