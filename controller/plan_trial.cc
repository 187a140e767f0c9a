#include "controller/plan_trial.h"

#include <algorithm>

namespace omnilearn {
namespace controller {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

PlanTrial::Verdict PlanTrial::Measured(double throughput, double margin) {
  if (on_trial_) {
    on_trial_ = false;
    if (throughput < previous_throughput_ * (1 - margin)) {
      new_throughput_ = throughput;
      return Verdict::kWorse;
    }
  }
  current_.push_back(throughput);
  if (current_.size() > kRemembered) current_.erase(current_.begin());
  return Verdict::kNone;
}

void PlanTrial::Replaced(const Plan& previous) {
  if (current_.empty()) return;  // nothing measured to compare with
  previous_ = previous;
  previous_throughput_ = Median(current_);
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
