#include "controller/time_model.h"

#include <algorithm>
#include <cmath>

namespace omnilearn {
namespace controller {
namespace {

// Observations at batches spanning less than this fraction are fitted as proportional:
// closer together, measurement noise swamps the fixed part of the time.
constexpr double kMinRelativeSpan = 0.25;
// The fixed part of a worker's time is at most this fraction of its fastest time.
constexpr double kMaxFixedFraction = 0.9;
// Relative standard error assumed for a mean of fewer than two samples.
constexpr double kSingleSampleError = 0.1;
// The link time learnt is the median of this many recent ones: a link's rate drifts slowly,
// and one slow exchange (a pause on the host, a burst of other traffic) should not swing a
// plan, made after every round with local steps.
constexpr size_t kLinkSamples = 15;

// Chan et al.'s merge of two pooled means, the memory then capped at `max_samples`.
Observation Pooled(Observation o, const Observation& fresh, double max_samples) {
  const double n = o.samples + fresh.samples;
  const double delta = fresh.mean_seconds - o.mean_seconds;
  o.m2 += fresh.m2 + delta * delta * o.samples * fresh.samples / n;
  o.mean_seconds += delta * fresh.samples / n;
  o.samples = n;
  if (n > max_samples) {
    o.m2 *= max_samples / n;
    o.samples = max_samples;
  }
  return o;
}

// A history's sums, weighted by samples: what its fits are computed from.
struct Sums {
  double sw = 0, sb = 0, st = 0, sbb = 0, stb = 0, rel_var = 0, dof = 0, min_t = 0;
  int64_t lo = 0, hi = 0;
  explicit Sums(const std::vector<Observation>& history);
  // Whether the batches span too little to tell a fixed part from the per-sample time.
  bool TooClose() const { return hi - lo < kMinRelativeSpan * hi; }
  // The least-squares per-sample time given the fixed part a.
  double PerSample(double a) const { return (stb - a * sb) / sbb; }
};

Sums::Sums(const std::vector<Observation>& history)
    : min_t(history.front().mean_seconds), lo(history.front().batch), hi(lo) {
  for (const Observation& o : history) {
    sw += o.samples;
    sb += o.samples * o.batch;
    st += o.samples * o.mean_seconds;
    sbb += o.samples * o.batch * o.batch;
    stb += o.samples * o.mean_seconds * o.batch;
    rel_var += o.m2 / (o.mean_seconds * o.mean_seconds);
    dof += o.samples - 1;
    lo = std::min(lo, o.batch);
    hi = std::max(hi, o.batch);
    min_t = std::min(min_t, o.mean_seconds);
  }
}

}  // namespace

double Observation::RelativeError() const {
  if (samples < 2) return kSingleSampleError;
  return std::sqrt(m2 / (samples - 1) / samples) / mean_seconds;
}

TimeModel FitTimeModel(const std::vector<Observation>& history) {
  TimeModel m;
  if (history.empty()) return m;
  m.measured = true;
  const Sums s(history);
  m.relative_error = s.dof >= 1 ? std::sqrt(s.rel_var / s.dof / s.sw) : kSingleSampleError;
  m.c = s.st / s.sb;
  if (s.TooClose()) return m;
  const double mb = s.sb / s.sw, mt = s.st / s.sw;
  const double slope = (s.stb - s.sw * mb * mt) / (s.sbb - s.sw * mb * mb);
  if (!(slope > 0)) return m;
  const double a = mt - slope * mb;
  if (a < 0) {
    m.c = s.PerSample(0);  // through the origin
  } else if (a > kMaxFixedFraction * s.min_t) {
    m.a = kMaxFixedFraction * s.min_t;
    m.c = s.PerSample(m.a);
  } else {
    m.a = a;
    m.c = slope;
  }
  return m;
}

std::pair<double, double> PredictedSeconds(const std::vector<Observation>& history, int64_t batch) {
  const double t = FitTimeModel(history).Seconds(batch);
  const Sums s(history);
  if (!s.TooClose()) return {t, t};
  const double a = kMaxFixedFraction * s.min_t;
  const double with_fixed = a + s.PerSample(a) * batch;
  return {std::min(t, with_fixed), std::max(t, with_fixed)};
}

bool HistoryPredicts(const std::vector<Observation>& history, int64_t batch, double seconds, double tolerance) {
  const auto [low, high] = PredictedSeconds(history, batch);
  return seconds >= (1 - tolerance) * low && seconds <= (1 + tolerance) * high;
}

void WorkerEstimator::AddStep(int64_t batch, double seconds) {
  Window& w = window_[batch];
  w.sum += seconds;
  w.sum_squares += seconds * seconds;
  w.count += 1;
}

void WorkerEstimator::AddLink(double seconds) { link_window_.push_back(seconds); }

std::vector<WorkerEstimator::Surprise> WorkerEstimator::Fold() {
  std::vector<Surprise> surprises;
  double total = 0;
  int count = 0;
  for (const auto& [batch, win] : window_) {
    const double mean = win.sum / win.count;
    Merge(Observation{batch, mean, static_cast<double>(win.count),
                      std::max(0.0, win.sum_squares - win.count * mean * mean)},
          &surprises);
    total += win.sum;
    count += win.count;
  }
  window_fresh_ = count > 0;
  if (count > 0) {
    last_window_seconds_ = total / count;
    last_window_batch_ = window_.size() == 1 ? window_.begin()->first : 0;
  }
  window_.clear();
  FoldLink();
  return surprises;
}

void WorkerEstimator::Merge(Observation fresh, std::vector<Surprise>* surprises) {
  auto it =
      std::find_if(history_.begin(), history_.end(), [&](const Observation& o) { return o.batch == fresh.batch; });
  if (it != history_.end()) {
    if (std::abs(fresh.mean_seconds - it->mean_seconds) > options_.change_threshold * it->mean_seconds) {
      history_.assign(1, fresh);  // same batch, different time: the worker's speed changed
      return;
    }
    const Observation merged = Pooled(*it, fresh, options_.history_samples);
    history_.erase(it);
    history_.push_back(merged);
    return;
  }
  // A new batch size: the history stays only if it roughly predicts the new time.
  if (!history_.empty()) {
    if (!HistoryPredicts(history_, fresh.batch, fresh.mean_seconds, 2 * options_.change_threshold)) {
      surprises->push_back({history_.back(), fresh});
      history_.clear();
    }
  }
  history_.push_back(fresh);
  if (history_.size() > kMaxObservations) history_.erase(history_.begin());
}

// The window's link times join the recent ones; the link time is their median.
void WorkerEstimator::FoldLink() {
  if (link_window_.empty()) return;
  links_.insert(links_.end(), link_window_.begin(), link_window_.end());
  link_window_.clear();
  while (links_.size() > kLinkSamples) links_.pop_front();
  std::vector<double> sorted(links_.begin(), links_.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  link_seconds_ = sorted.size() % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

void WorkerEstimator::DropAbove(int64_t batch) {
  history_.erase(
      std::remove_if(history_.begin(), history_.end(), [&](const Observation& o) { return o.batch > batch; }),
      history_.end());
}

}  // namespace controller
}  // namespace omnilearn
