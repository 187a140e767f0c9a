#include "controller/step_filter.h"

#include <algorithm>
#include <vector>

namespace omnilearn {
namespace controller {

bool StepFilter::LearnLink() {
  const bool first = !first_link_seen_;
  first_link_seen_ = true;
  return !(first && options_.skip_first_link);
}

StepVerdict StepFilter::Judge(int64_t batch, double seconds, bool overran, std::vector<MeasuredStep>* learn,
                              StepsSetAside* tally) {
  if (overran && options_.set_aside_overruns) {
    ++tally->overran;
    return StepVerdict::kOverran;
  }
  const MeasuredStep now{batch, seconds};
  if (!first_seen_) {
    first_seen_ = true;
    if (options_.judge_first && options_.factor > 0) {
      held_ = now;
      return StepVerdict::kHeld;
    }
  }
  const std::optional<double> bound = Bound(batch);
  if (bound && seconds > options_.factor * *bound) {
    run_.push_back(now);
    if (static_cast<int>(run_.size()) < options_.run) {
      ++tally->outlier;
      return StepVerdict::kOutlier;
    }
    // A change of speed: the steps before it bound nothing any more, the run's own do. The
    // run's earlier steps stay unlearnt (a change is learnt from the step that shows it).
    recent_.assign(run_.begin(), run_.end() - 1);
  }
  run_.clear();
  if (held_) JudgeHeld(now, learn, tally);
  Remember(now);
  learn->push_back(now);
  return StepVerdict::kAccepted;
}

void StepFilter::JudgeHeld(const MeasuredStep& now, std::vector<MeasuredStep>* learn, StepsSetAside* tally) {
  const MeasuredStep first = *held_;
  held_.reset();
  if (first.batch <= now.batch && first.seconds > options_.factor * now.seconds) {
    ++tally->warmup;
    return;
  }
  Remember(first);
  learn->push_back(first);
}

std::optional<double> StepFilter::Bound(int64_t batch) const {
  if (options_.factor <= 0) return std::nullopt;
  std::vector<double> times;
  for (const MeasuredStep& s : recent_) {
    if (s.batch >= batch) times.push_back(s.seconds);
  }
  if (static_cast<int>(times.size()) < options_.min_window) return std::nullopt;
  const size_t mid = times.size() / 2;
  std::nth_element(times.begin(), times.begin() + mid, times.end());
  return times[mid];
}

void StepFilter::Remember(const MeasuredStep& step) {
  recent_.push_back(step);
  while (static_cast<int>(recent_.size()) > options_.window) recent_.pop_front();
}

}  // namespace controller
}  // namespace omnilearn
