#include "controller/equal_time_solver.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace omnilearn {
namespace controller {
namespace {

// Bisection steps of the equal-time solve: far below a sample's worth of time.
constexpr int kBisections = 200;

double Clamped(double batch, const BatchBounds& b) {
  return std::clamp(batch, static_cast<double>(b.min), static_cast<double>(b.max));
}

}  // namespace

int64_t FeasibleTotal(int64_t global_batch, const Bounds& bounds) {
  int64_t lo = 0, hi = 0;
  for (const auto& [id, b] : bounds) {
    lo += b.min;
    hi += b.max;
  }
  return std::clamp(global_batch, lo, hi);
}

std::map<WorkerId, int64_t> RoundToTotal(const std::map<WorkerId, double>& targets, const Bounds& bounds,
                                         int64_t total) {
  std::map<WorkerId, int64_t> out;
  int64_t sum = 0;
  for (const auto& [id, r] : targets) {
    out[id] = static_cast<int64_t>(std::floor(Clamped(r, bounds.at(id))));
    sum += out[id];
  }
  while (sum != total) {
    const bool grow = sum < total;
    WorkerId pick = 0;
    double best = grow ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    bool found = false;
    for (const auto& [id, r] : targets) {
      const BatchBounds& b = bounds.at(id);
      if (grow ? out[id] >= b.max : out[id] <= b.min) continue;
      const double rem = r - out[id];
      if (grow ? rem > best : rem < best) {
        best = rem;
        pick = id;
        found = true;
      }
    }
    if (!found) break;  // an infeasible total: as close as the bounds allow
    out[pick] += grow ? 1 : -1;
    sum += grow ? 1 : -1;
  }
  return out;
}

std::map<WorkerId, int64_t> SolveEqualTime(const std::map<WorkerId, TimeModel>& models, const Bounds& bounds,
                                           int64_t total) {
  auto batch_at = [&](WorkerId id, double t) {
    const TimeModel& m = models.at(id);
    return Clamped((t - m.a) / m.c, bounds.at(id));
  };
  double t_lo = std::numeric_limits<double>::infinity(), t_hi = 0;
  for (const auto& [id, b] : bounds) {
    t_lo = std::min(t_lo, models.at(id).Seconds(b.min));
    t_hi = std::max(t_hi, models.at(id).Seconds(b.max));
  }
  for (int i = 0; i < kBisections; ++i) {
    const double mid = 0.5 * (t_lo + t_hi);
    double sum = 0;
    for (const auto& [id, b] : bounds) sum += batch_at(id, mid);
    (sum < static_cast<double>(total) ? t_lo : t_hi) = mid;
  }
  std::map<WorkerId, double> targets;
  for (const auto& [id, b] : bounds) targets[id] = batch_at(id, t_hi);
  return RoundToTotal(targets, bounds, total);
}

double Spread(const std::map<WorkerId, TimeModel>& models, const std::map<WorkerId, int64_t>& batches) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  int n = 0;
  for (const auto& [id, b] : batches) {
    const TimeModel& m = models.at(id);
    if (!m.measured) continue;
    const double t = m.Seconds(b);
    lo = std::min(lo, t);
    hi = std::max(hi, t);
    ++n;
  }
  return n < 2 ? 1.0 : hi / lo;
}

}  // namespace controller
}  // namespace omnilearn
