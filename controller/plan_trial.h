// A new batch plan on trial against the plan it replaced, judged by the throughput their
// rounds delivered (what the time models predicted is what is being checked).
//
// A plan is adopted because the time models predict it better. When its first window of
// rounds delivers less than the old plan's windows did (beyond the noise), the verdict is
// kWorse and the caller tells noise from a real change: noise (a burst of slow steps on one
// worker, read as a change of speed) goes back to the old plan (Reverted); a real change (a
// worker that did slow down makes every plan slower) keeps the new one (Kept).
//
// Pure: no clock, no threads. Thread-compatible.
#ifndef OMNILEARN_CONTROLLER_PLAN_TRIAL_H_
#define OMNILEARN_CONTROLLER_PLAN_TRIAL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "common/worker_id.h"

namespace omnilearn {
namespace controller {

class PlanTrial {
 public:
  using Plan = std::map<WorkerId, int64_t>;

  enum class Verdict {
    kNone,   // nothing to judge: the plan in force stays (or the caller's rules decide)
    kWorse,  // the new plan's first window delivered less than previous() did
  };

  // A change is on trial only when it moves some worker's batch by at least kMinSamples and
  // more than kMinFraction of it: smaller ones are corrections within the noise.
  static constexpr int64_t kMinSamples = 2;
  static constexpr double kMinFraction = 0.1;

  // A window of rounds under the plan in force delivered `throughput` samples per second;
  // `margin` is the relative difference that noise explains (e.g. 0.05), widened to three
  // times the spread of the old plan's own windows (robust: a burst among them does not
  // widen it).
  Verdict Measured(double throughput, double margin);
  // The plan in force, `previous`, was replaced by `next`, which the solver chose: a trial
  // starts when `previous` has a measured throughput and the change is not a small one.
  void Replaced(const Plan& previous, const Plan& next);
  // After kWorse: previous() is back in force (its record is what it measured before), or
  // the new plan stays (its record starts with the window just judged).
  void Reverted();
  void Kept();
  // The workers changed: nothing measured so far compares with what comes.
  void Reset();

  bool on_trial() const { return on_trial_; }
  const Plan& previous() const { return previous_; }

 private:
  static constexpr size_t kRemembered = 5;  // windows of the plan in force

  bool on_trial_ = false;
  std::vector<double> current_;  // throughputs of the plan in force, newest last
  Plan previous_;
  double previous_throughput_ = 0;  // its median window
  double previous_noise_ = 0;       // 3 x the relative spread of its windows
  double new_throughput_ = 0;       // the new plan's first window
};

}  // namespace controller
}  // namespace omnilearn

#endif  // OMNILEARN_CONTROLLER_PLAN_TRIAL_H_
