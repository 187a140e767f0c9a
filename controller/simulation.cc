#include "controller/simulation.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace omnilearn {
namespace controller {
namespace {

double Spread(const std::vector<double>& t) {
  const auto [lo, hi] = std::minmax_element(t.begin(), t.end());
  return t.empty() ? 1.0 : *hi / *lo;
}

// The options' values: at least one worker, per-worker lists of the workers' length,
// times and the schedule in range.
absl::Status CheckSimulationOptions(const SimulationOptions& options) {
  const size_t n = options.speeds.size();
  if (n == 0) return absl::InvalidArgumentError("simulation needs at least one worker speed");
  if (options.rounds < 0 || options.iterations_per_adjustment < 1 || options.noise < 0 ||
      options.overhead_seconds < 0 || !(options.samples_per_second > 0)) {
    return absl::InvalidArgumentError("simulation options out of range");
  }
  if (!options.oom_batches.empty() && options.oom_batches.size() != n) {
    return absl::InvalidArgumentError("oom_batches needs one value per worker");
  }
  if (!options.link_seconds.empty() && options.link_seconds.size() != n) {
    return absl::InvalidArgumentError("link_seconds needs one value per worker");
  }
  for (double l : options.link_seconds) {
    if (!(l >= 0)) return absl::InvalidArgumentError("link seconds must be >= 0");
  }
  if (!options.load_probability.empty() && options.load_probability.size() != n) {
    return absl::InvalidArgumentError("load_probability needs one value per worker");
  }
  for (double p : options.load_probability) {
    if (!(p >= 0 && p <= 1)) return absl::InvalidArgumentError("a load probability must be in [0, 1]");
  }
  if (!(options.first_step_factor >= 1) || !(options.load_factor >= 1)) {
    return absl::InvalidArgumentError("first_step_factor and load_factor must be >= 1");
  }
  for (const SpeedChange& c : options.schedule) {
    if (c.worker < 0 || static_cast<size_t>(c.worker) >= n || !(c.speed > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("bad schedule entry for worker ", c.worker));
    }
  }
  return absl::OkStatus();
}

// What a worker's host does to one step: a factor on its time, and whether its emulated
// device overran.
struct HostEffect {
  double factor = 1;
  bool overran = false;
};

// The hosts' disturbances (SimulationOptions), on a random stream apart from the devices'
// noise: runs without them draw the same noise as before.
class Hosts {
 public:
  explicit Hosts(const SimulationOptions& o) : o_(o), rng_(o.seed ^ 0x9e3779b97f4a7c15ull) {}
  HostEffect Next(size_t worker, bool first_step) {
    HostEffect e;
    if (first_step) e.factor *= o_.first_step_factor;
    if (!o_.load_probability.empty() && uniform_(rng_) < o_.load_probability[worker]) {
      e.factor *= o_.load_factor;
      e.overran = o_.load_overruns;
    }
    return e;
  }

 private:
  const SimulationOptions& o_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

}  // namespace

absl::StatusOr<std::vector<SimulationRound>> Simulate(const SimulationOptions& options) {
  if (absl::Status s = CheckSimulationOptions(options); !s.ok()) return s;
  const size_t n = options.speeds.size();
  absl::StatusOr<BatchController> made = BatchController::Create(options.controller);
  if (!made.ok()) return made.status();
  BatchController& controller = *made;
  for (size_t k = 0; k < n; ++k) {
    if (absl::Status s = controller.AddWorker(k); !s.ok()) return s;
  }
  std::vector<double> speeds = options.speeds;
  std::mt19937_64 rng(options.seed);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::vector<SimulationRound> out;
  Hosts hosts(options);
  for (int r = 0; r <= options.rounds; ++r) {
    for (const SpeedChange& c : options.schedule) {
      if (c.round == r) speeds[c.worker] = c.speed;
    }
    SimulationRound row;
    row.round = r;
    auto link = [&](size_t k) { return options.link_seconds.empty() ? 0.0 : options.link_seconds[k]; };
    for (size_t k = 0; k < n; ++k) {
      const int64_t b = controller.plan().batch(k);
      row.batches.push_back(b);
      row.true_seconds.push_back(options.overhead_seconds + b / (options.samples_per_second * speeds[k]));
      row.true_iteration_seconds.push_back(row.true_seconds.back() + link(k));
    }
    row.measured_seconds.assign(n, 0);
    for (int i = 0; i < options.iterations_per_adjustment; ++i) {
      for (size_t k = 0; k < n; ++k) {
        if (!options.oom_batches.empty() && options.oom_batches[k] > 0 && row.batches[k] > options.oom_batches[k]) {
          if (absl::Status s = controller.ReportOutOfMemory(k, row.batches[k]); !s.ok()) return s;
          continue;
        }
        double t = row.true_seconds[k] * std::max(0.05, 1 + options.noise * gauss(rng));
        // (No draw for a worker without a link: runs without links see the same noise as before.)
        const double l = link(k) > 0 ? link(k) * std::max(0.05, 1 + options.noise * gauss(rng)) : 0;
        const HostEffect host = hosts.Next(k, r == 0 && i == 0);
        t *= host.factor;
        row.measured_seconds[k] += t / options.iterations_per_adjustment;
        if (absl::Status s = controller.Report(k, {row.batches[k], t, l, host.overran}); !s.ok()) return s;
      }
    }
    row.true_spread = Spread(row.true_seconds);
    row.true_iteration_spread = Spread(row.true_iteration_seconds);
    row.measured_spread = Spread(row.measured_seconds);
    if (r < options.rounds) row.changed = controller.Adjust().changed;
    out.push_back(std::move(row));
  }
  return out;
}

absl::StatusOr<std::vector<double>> ParseSpeeds(absl::string_view text, bool allow_zero) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double v;
    if (!absl::SimpleAtod(part, &v) || !(allow_zero ? v >= 0 : v > 0) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value '", part, allow_zero ? "' (want numbers >= 0)" : "' (want numbers > 0)"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError("no speeds given");
  return out;
}

absl::StatusOr<std::vector<SpeedChange>> ParseSchedule(absl::string_view text) {
  std::vector<SpeedChange> out;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> f = absl::StrSplit(entry, ':');
    SpeedChange c;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &c.round) || !absl::SimpleAtoi(f[1], &c.worker) ||
        !absl::SimpleAtod(f[2], &c.speed) || c.round < 0 || c.worker < 0 || !(c.speed > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("bad schedule entry '", entry, "' (want round:worker:speed)"));
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace controller
}  // namespace omnilearn
