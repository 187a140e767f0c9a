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
// Weight of a window's mean link time against what was learnt before it.
constexpr double kLinkSmoothing = 0.5;

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

}  // namespace

double Observation::RelativeError() const {
  if (samples < 2) return kSingleSampleError;
  return std::sqrt(m2 / (samples - 1) / samples) / mean_seconds;
}

TimeModel FitTimeModel(const std::vector<Observation>& history) {
  TimeModel m;
  if (history.empty()) return m;
  m.measured = true;
  double sw = 0, sb = 0, st = 0, sbb = 0, stb = 0, rel_var = 0, dof = 0;
  int64_t lo = history.front().batch, hi = lo;
  double min_t = history.front().mean_seconds;
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
  m.relative_error = dof >= 1 ? std::sqrt(rel_var / dof / sw) : kSingleSampleError;
  m.c = st / sb;
  if (hi - lo < kMinRelativeSpan * hi) return m;
  const double mb = sb / sw, mt = st / sw;
  const double slope = (stb - sw * mb * mt) / (sbb - sw * mb * mb);
  if (!(slope > 0)) return m;
  const double a = mt - slope * mb;
  if (a < 0) {
    m.c = stb / sbb;  // through the origin
  } else if (a > kMaxFixedFraction * min_t) {
    m.a = kMaxFixedFraction * min_t;
    m.c = (stb - m.a * sb) / sbb;
  } else {
    m.a = a;
    m.c = slope;
  }
  return m;
}

void WorkerEstimator::AddStep(int64_t batch, double seconds) {
  Window& w = window_[batch];
  w.sum += seconds;
  w.sum_squares += seconds * seconds;
  w.count += 1;
}

void WorkerEstimator::AddLink(double seconds) {
  link_sum_ += seconds;
  link_count_ += 1;
}

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
    const double predicted = Fit().Seconds(fresh.batch);
    if (std::abs(fresh.mean_seconds - predicted) > 2 * options_.change_threshold * predicted) {
      surprises->push_back({history_.back(), fresh});
      history_.clear();
    }
  }
  history_.push_back(fresh);
  if (history_.size() > kMaxObservations) history_.erase(history_.begin());
}

// The window's mean link time, smoothed across windows (a link's rate drifts slowly; one
// congested window should not swing the plan).
void WorkerEstimator::FoldLink() {
  if (link_count_ == 0) return;
  const double mean = link_sum_ / link_count_;
  link_seconds_ = link_count_total_ > 0 ? kLinkSmoothing * mean + (1 - kLinkSmoothing) * link_seconds_ : mean;
  link_count_total_ += link_count_;
  link_sum_ = 0;
  link_count_ = 0;
}

void WorkerEstimator::DropAbove(int64_t batch) {
  history_.erase(
      std::remove_if(history_.begin(), history_.end(), [&](const Observation& o) { return o.batch > batch; }),
      history_.end());
}

}  // namespace controller
}  // namespace omnilearn
