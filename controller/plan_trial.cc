#include "controller/plan_trial.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace omnilearn {
namespace controller {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The windows' spread relative to their median, robust to one burst among them: the median
// absolute deviation, scaled to a normal's standard deviation (0 with fewer than three).
double RelativeSpread(const std::vector<double>& v) {
  if (v.size() < 3) return 0;
  const double m = Median(v);
  std::vector<double> deviations;
  for (double x : v) deviations.push_back(std::abs(x - m));
  return 1.4826 * Median(deviations) / m;
}

bool Moved(const PlanTrial::Plan& from, const PlanTrial::Plan& to) {
  for (const auto& [id, b] : to) {
    auto it = from.find(id);
    if (it == from.end()) return true;
    const int64_t step = std::abs(b - it->second);
    if (step >= PlanTrial::kMinSamples && step > PlanTrial::kMinFraction * it->second) return true;
  }
  return false;
}

}  // namespace

PlanTrial::Verdict PlanTrial::Measured(double throughput, double margin) {
  if (on_trial_) {
    on_trial_ = false;
    if (throughput < previous_throughput_ * (1 - std::max(margin, previous_noise_))) {
      new_throughput_ = throughput;
      return Verdict::kWorse;
    }
  }
  current_.push_back(throughput);
  if (current_.size() > kRemembered) current_.erase(current_.begin());
  return Verdict::kNone;
}

void PlanTrial::Replaced(const Plan& previous, const Plan& next) {
  if (current_.empty()) return;  // nothing measured to compare with
  if (!Moved(previous, next)) {  // a correction within the noise: no trial, the record goes on
    current_.clear();
    return;
  }
  previous_ = previous;
  previous_throughput_ = Median(current_);
  previous_noise_ = 3 * RelativeSpread(current_);
  current_.clear();
  on_trial_ = true;
}

void PlanTrial::Reverted() { current_ = {previous_throughput_}; }

void PlanTrial::Kept() { current_ = {new_throughput_}; }

void PlanTrial::Reset() {
  on_trial_ = false;
  current_.clear();
  previous_.clear();
}

}  // namespace controller
}  // namespace omnilearn
