// Which of a worker's step times the controller learns from.
//
// A measured step is set aside when its time says more about the host than about the
// device: the worker's first step after it joins when it is an outlier against its second
// (compilation, caches, the allocator's first growth: a torch.compile'd model's first step
// took 81 s against 0.3 s after it; the first step waits for the second to be judged),
// a step whose emulated device overran (the host's CPU, not the emulated device, set its
// time: a server beside the worker took the cores), and a step slower than `factor` x the
// median of its recent accepted steps at a batch at least as large (a step time does not
// fall as the batch grows). A step at a batch larger than the recent ones is not judged: a
// memory limit (a batch that thrashes) shows there first, and the controller's memory guard
// must see it. A run of `run` outliers in a row is a change of speed (a device that slowed
// down), not noise: that step is accepted and the recent steps start again from the run's. Faster
// is never an outlier: a device that sped up is learnt at once. A worker's first link time
// (its first round's) is set aside too.
//
// Pure: no clock, no threads. One per worker.
#ifndef OMNILEARN_CONTROLLER_STEP_FILTER_H_
#define OMNILEARN_CONTROLLER_STEP_FILTER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace omnilearn {
namespace controller {

struct StepFilterOptions {
  bool set_aside_overruns = true;  // an emulated device's overrun is not learnt from
  bool judge_first = true;         // the first step waits for the second, and is dropped when an outlier
  double factor = 2.0;             // an outlier is slower than factor x its bound (0: no outlier tests)
  int run = 4;                     // this many outliers in a row are a change of speed
  int window = 8;                  // recent accepted steps the bound is taken over (their median)
  int min_window = 3;              // the outlier test needs this many recent steps at batches >= the step's
  // A worker's first link time is of its first round, on connections just opened (TCP's and
  // HTTP/2's windows still growing, the round's start skewed by the joins): not learnt from.
  bool skip_first_link = true;

  // Every step learnt from, as it comes.
  static StepFilterOptions Off() {
    StepFilterOptions o;
    o.set_aside_overruns = false;
    o.judge_first = false;
    o.factor = 0;
    o.skip_first_link = false;
    return o;
  }
};

// Of the step just judged: learnt from (accepted), held (the first, until the second is
// in), or set aside, and why.
enum class StepVerdict { kAccepted, kHeld, kOverran, kOutlier };

// Steps set aside so far, by reason.
struct StepsSetAside {
  uint64_t warmup = 0;   // a first step, an outlier against the second
  uint64_t overran = 0;  // an emulated device's overrun
  uint64_t outlier = 0;  // slower than `factor` x the recent steps' bound
};

// A step to learn from.
struct MeasuredStep {
  int64_t batch = 0;
  double seconds = 0;
};

class StepFilter {
 public:
  explicit StepFilter(const StepFilterOptions& options) : options_(options) {}

  // The verdict on one step of `batch` samples that took `seconds`; `overran`: its
  // emulated device's time was exceeded by the real compute. Appends to `learn` the steps
  // to learn from now, oldest first: this one when accepted, and the held first step when
  // this one clears it. What it sets aside (this step, or the held one) is counted in *tally.
  StepVerdict Judge(int64_t batch, double seconds, bool overran, std::vector<MeasuredStep>* learn,
                    StepsSetAside* tally);
  // Whether a link time reported (> 0) is learnt from: all but the first (skip_first_link).
  bool LearnLink();

 private:
  // The held first step, against `now` (an accepted step): learnt, or dropped as warm-up.
  void JudgeHeld(const MeasuredStep& now, std::vector<MeasuredStep>* learn, StepsSetAside* tally);
  // The median time of the recent accepted steps at batches >= `batch`, when there are
  // min_window of them.
  std::optional<double> Bound(int64_t batch) const;
  void Remember(const MeasuredStep& step);

  StepFilterOptions options_;
  std::optional<MeasuredStep> held_;  // the first step, until a second is accepted
  bool first_seen_ = false;
  bool first_link_seen_ = false;
  std::vector<MeasuredStep> run_;    // the outliers in a row so far
  std::deque<MeasuredStep> recent_;  // accepted, newest last
};

}  // namespace controller
}  // namespace omnilearn

#endif  // OMNILEARN_CONTROLLER_STEP_FILTER_H_
