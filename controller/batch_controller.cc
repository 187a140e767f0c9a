#include "controller/batch_controller.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace controller {
namespace {

// Reports an observation needs before the memory guard trusts its throughput.
constexpr double kGuardMinSamples = 3;
// Standard errors a throughput drop must exceed to be trusted by the memory guard.
constexpr double kGuardConfidence = 3.0;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

absl::StatusOr<Policy> ParsePolicy(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "omnilearn") return Policy::kOmniLearn;
  if (n == "paper") return Policy::kPaper;
  if (n == "off") return Policy::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown controller policy '", name, "' (want omnilearn, paper or off)"));
}

std::string PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kOmniLearn:
      return "omnilearn";
    case Policy::kPaper:
      return "paper";
    case Policy::kOff:
      return "off";
  }
  return "unknown";
}

absl::StatusOr<Balance> ParseBalance(absl::string_view name) {
  if (name == "iteration") return Balance::kIteration;
  if (name == "compute") return Balance::kCompute;
  return absl::InvalidArgumentError(absl::StrCat("unknown balance '", name, "': want iteration or compute"));
}

std::string BalanceName(Balance balance) { return balance == Balance::kIteration ? "iteration" : "compute"; }

int64_t BatchPlan::batch(WorkerId id) const {
  auto it = workers.find(id);
  return it == workers.end() ? 0 : it->second.batch;
}

absl::StatusOr<BatchController> BatchController::Create(const ControllerOptions& options) {
  ControllerOptions o = options;
  if (o.global_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("global batch must be >= 1, got ", o.global_batch));
  }
  if (o.max_batch == 0) o.max_batch = o.global_batch;
  if (o.min_batch < 1 || o.max_batch < o.min_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch bounds must satisfy 1 <= min <= max, got [", o.min_batch, ", ", o.max_batch, "]"));
  }
  auto bad_fraction = [](double v) { return !(v >= 0 && v < 1); };
  if (bad_fraction(o.deadband) || bad_fraction(o.paper_deadband) || !(o.change_threshold > 0) || !(o.confidence >= 0) ||
      bad_fraction(o.throughput_drop) || !(o.oom_backoff > 0 && o.oom_backoff < 1) || !(o.history_samples >= 1) ||
      !(o.link_band >= 0 && std::isfinite(o.link_band))) {
    return absl::InvalidArgumentError("controller fractions out of range");
  }
  return BatchController(o);
}

absl::Status BatchController::AddWorker(WorkerId id, WorkerLimits limits) {
  return AddWorker(id, limits, WorkerMemory{});
}

absl::Status BatchController::AddWorker(WorkerId id, WorkerLimits limits, const WorkerMemory& memory) {
  auto bad = [id](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", id, ": remembered ", what, " is out of range"));
  };
  if (memory.batch < 0 || memory.guard_max < 0) return bad("batch or ceiling");
  if (memory.history.size() > kMaxObservations) return bad("history");
  for (const Observation& o : memory.history) {
    if (o.batch < 1 || !std::isfinite(o.mean_seconds) || o.mean_seconds <= 0 || !std::isfinite(o.samples) ||
        o.samples < 1 || !std::isfinite(o.m2) || o.m2 < 0) {
      return bad("observation");
    }
  }
  if (workers_.count(id)) return absl::AlreadyExistsError(absl::StrCat("worker ", id, " already added"));
  Worker w;
  w.filter = StepFilter(options_.steps);
  w.estimator = WorkerEstimator(EstimatorOptions{options_.change_threshold, options_.history_samples});
  w.min_batch = limits.min_batch > 0 ? limits.min_batch : options_.min_batch;
  w.max_batch = limits.max_batch > 0 ? limits.max_batch : options_.max_batch;
  if (limits.min_batch < 0 || limits.max_batch < 0 || w.max_batch < w.min_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", id, ": bad batch bounds [", w.min_batch, ", ", w.max_batch, "]"));
  }
  w.guard_max = memory.guard_max > 0 ? std::max(memory.guard_max, w.min_batch) : 0;
  w.estimator.set_history(memory.history);
  // kPaper re-plans from batches: the remembered ones keep their ratios until the next
  // adjustment, whoever else is (or is not yet) back.
  w.remembered_batch = memory.batch;
  workers_.emplace(id, std::move(w));
  Replan();
  return absl::OkStatus();
}

absl::StatusOr<WorkerMemory> BatchController::Remember(WorkerId id) const {
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
  WorkerMemory m;
  m.batch = plan_.batch(id);
  m.guard_max = it->second.guard_max;
  m.history = it->second.estimator.history();
  return m;
}

absl::Status BatchController::RemoveWorker(WorkerId id) {
  if (workers_.erase(id) == 0) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
  Replan();
  return absl::OkStatus();
}

absl::Status BatchController::Report(WorkerId id, const ComputeReport& report) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
  if (report.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch must be >= 1, got ", report.batch));
  }
  if (!std::isfinite(report.compute_seconds) || report.compute_seconds <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("compute seconds must be finite and > 0, got ", report.compute_seconds));
  }
  if (!std::isfinite(report.link_seconds) || report.link_seconds < 0) {
    return absl::InvalidArgumentError(absl::StrCat("link seconds must be finite and >= 0, got ", report.link_seconds));
  }
  Worker& w = it->second;
  if (report.link_seconds > 0 && w.filter.LearnLink()) w.estimator.AddLink(report.link_seconds);
  std::vector<MeasuredStep> learn;
  w.filter.Judge(report.batch, report.compute_seconds, report.overran, &learn, &plan_.set_aside);
  for (const MeasuredStep& step : learn) w.estimator.AddStep(step.batch, step.seconds);
  return absl::OkStatus();
}

absl::Status BatchController::ReportOutOfMemory(WorkerId id, int64_t batch) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("unknown worker ", id));
  if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("batch must be >= 1, got ", batch));
  Worker& w = it->second;
  // Bisect between the largest batch known to fit and the one that failed, but give
  // up at least (1 - oom_backoff) of the failing batch.
  int64_t known_good = w.min_batch;
  for (const Observation& o : w.estimator.history()) {
    if (o.batch < batch) known_good = std::max(known_good, o.batch);
  }
  const int64_t cap = std::max<int64_t>(
      w.min_batch, std::min<int64_t>({batch - 1, static_cast<int64_t>(std::floor(batch * options_.oom_backoff)),
                                      std::max(known_good, (known_good + batch) / 2)}));
  if (w.guard_max == 0 || cap < w.guard_max) w.guard_max = cap;
  w.estimator.DropAbove(cap);  // measured above the cap: a state that no longer exists
  Replan();
  return absl::OkStatus();
}

void BatchController::ApplyMemoryGuard(Worker& w, const Observation& before, const Observation& now) {
  if (now.batch <= before.batch || now.samples < kGuardMinSamples || before.samples < kGuardMinSamples) {
    return;
  }
  const double x_now = now.batch / now.mean_seconds;
  const double x_before = before.batch / before.mean_seconds;
  const double drop = 1 - x_now / x_before;
  const double noise = std::hypot(now.RelativeError(), before.RelativeError());
  if (drop > options_.throughput_drop && drop > kGuardConfidence * noise) {
    if (w.guard_max == 0 || before.batch < w.guard_max) w.guard_max = std::max(before.batch, w.min_batch);
  }
}

std::map<WorkerId, TimeModel> BatchController::Models() const {
  std::map<WorkerId, TimeModel> models;
  std::vector<double> as, cs;
  for (const auto& [id, w] : workers_) {
    TimeModel m = w.estimator.Fit();
    if (m.measured) {
      as.push_back(m.a);
      cs.push_back(m.c);
    }
    models[id] = m;
  }
  // Workers without measurements are assumed to be typical of the others.
  TimeModel typical;
  typical.c = 1;
  if (!cs.empty()) {
    typical.a = Median(as);
    typical.c = Median(cs);
  }
  const std::map<WorkerId, double> links = ChargedLinks();
  for (auto& [id, m] : models) {
    if (!m.measured) m = TimeModel{typical.a, typical.c, false, 0};
    // Whole iterations: the link time is a fixed part of the worker's iteration.
    if (options_.balance == Balance::kIteration) m.a += links.at(id);
  }
  return models;
}

std::map<WorkerId, double> BatchController::ChargedLinks() const {
  double baseline = std::numeric_limits<double>::infinity();
  for (const auto& [id, w] : workers_) {
    if (w.estimator.link_known()) baseline = std::min(baseline, w.estimator.link_seconds());
  }
  std::map<WorkerId, double> charged;
  for (const auto& [id, w] : workers_) {
    if (!std::isfinite(baseline)) {
      charged[id] = 0;  // no link measured yet
    } else {
      const double over =
          w.estimator.link_known() ? w.estimator.link_seconds() - (1 + options_.link_band) * baseline : 0;
      charged[id] = baseline + std::max(0.0, over);
    }
  }
  return charged;
}

Bounds BatchController::bounds() const {
  Bounds out;
  for (const auto& [id, w] : workers_) out[id] = BatchBounds{w.min_batch, w.ceiling()};
  return out;
}

std::map<WorkerId, int64_t> BatchController::PaperRule() {
  // The paper works from the times measured since the last adjustment (an epoch).
  std::map<WorkerId, double> times;
  double tbar = 0;
  for (const auto& [id, w] : workers_) {
    if (w.estimator.last_window_batch() != plan_.batch(id)) continue;
    times[id] = w.estimator.last_window_seconds();
    tbar += times[id];
  }
  std::map<WorkerId, double> targets;
  for (const auto& [id, w] : workers_) targets[id] = static_cast<double>(plan_.batch(id));
  if (times.size() < 2) return RoundToTotal(targets);
  tbar /= times.size();
  bool any = false;
  for (const auto& [id, t] : times) {
    const double ratio = tbar / t;
    if (std::abs(ratio - 1) > options_.paper_deadband) {
      targets[id] *= ratio;
      any = true;
    }
  }
  if (!any) return RoundToTotal(targets);
  double sum = 0;
  for (const auto& [id, r] : targets) sum += r;
  const double scale = FeasibleTotal() / sum;  // the global batch stays constant
  for (auto& [id, r] : targets) r *= scale;
  return RoundToTotal(targets);
}

double BatchController::EffectiveDeadband(const std::map<WorkerId, TimeModel>& models) const {
  double worst = 0;
  for (const auto& [id, m] : models) {
    if (m.measured) worst = std::max(worst, m.relative_error);
  }
  // max/min of two such estimates: relative error ~ sqrt(2) * each.
  return std::max(options_.deadband, options_.confidence * std::sqrt(2.0) * worst);
}

bool BatchController::PlanIsValid() const {
  if (plan_.workers.size() != workers_.size()) return false;
  int64_t sum = 0;
  for (const auto& [id, w] : workers_) {
    const int64_t b = plan_.batch(id);
    if (b < w.min_batch || b > w.ceiling()) return false;
    sum += b;
  }
  return sum == FeasibleTotal();
}

void BatchController::SetPlan(const std::map<WorkerId, int64_t>& batches, const std::map<WorkerId, TimeModel>& models) {
  bool changed = batches.size() != plan_.workers.size();
  BatchPlan next;
  for (const auto& [id, b] : batches) {
    if (plan_.batch(id) != b) changed = true;
    const TimeModel& m = models.at(id);
    WorkerPlan& wp = next.workers[id];
    wp.batch = b;
    wp.max_batch = workers_.at(id).ceiling();
    wp.predicted_seconds = m.measured ? m.Seconds(b) : 0;
    next.total += b;
  }
  next.adjustment = plan_.adjustment;
  next.reverts = plan_.reverts;
  next.changes = plan_.changes + (changed ? 1 : 0);
  next.changed = changed;
  next.predicted_spread = Spread(models, batches);
  plan_ = std::move(next);
}

void BatchController::Replan() {
  trial_.Reset();
  const auto models = Models();
  if (options_.policy == Policy::kOmniLearn) {
    SetPlan(SolveEqualTime(models), models);
    return;
  }
  std::map<WorkerId, TimeModel> unit;
  for (const auto& [id, w] : workers_) unit[id] = TimeModel{0, 1, false, 0};
  if (options_.policy == Policy::kOff) {
    SetPlan(SolveEqualTime(unit), models);
    return;
  }
  // kPaper: survivors keep their batch (remembered ones their remembered batch), newcomers
  // get the survivors' mean, all rescaled to B.
  auto known = [this](WorkerId id, const Worker& w) {
    return w.remembered_batch > 0 ? w.remembered_batch : plan_.batch(id);
  };
  double kept = 0;
  int survivors = 0;
  for (const auto& [id, w] : workers_) {
    if (known(id, w) > 0) {
      kept += known(id, w);
      ++survivors;
    }
  }
  const double share = survivors > 0 ? kept / survivors : 1.0;
  std::map<WorkerId, double> targets;
  double sum = 0;
  for (const auto& [id, w] : workers_) {
    const int64_t b = known(id, w);
    targets[id] = b > 0 ? b : share;
    sum += targets[id];
  }
  const double scale = FeasibleTotal() / sum;
  for (auto& [id, r] : targets) r *= scale;
  SetPlan(RoundToTotal(targets), models);
}

const BatchPlan& BatchController::Adjust() {
  std::map<WorkerId, std::vector<Observation>> before;
  for (const auto& [id, w] : workers_) before[id] = w.estimator.history();
  for (auto& [id, w] : workers_) {
    w.remembered_batch = 0;  // from now on the measurements speak
    // A grown batch far slower than predicted may be memory thrash rather than a slower
    // worker: the guard judges it before its history goes.
    for (const WorkerEstimator::Surprise& s : w.estimator.Fold()) ApplyMemoryGuard(w, s.before, s.now);
    const std::vector<Observation>& history = w.estimator.history();
    if (history.size() >= 2) ApplyMemoryGuard(w, history[history.size() - 2], history.back());
  }
  ++plan_.adjustment;
  if (workers_.empty()) {
    SetPlan({}, {});
    return plan_;
  }
  const auto models = Models();
  if (!PlanIsValid()) {
    Replan();
    return plan_;
  }
  std::map<WorkerId, int64_t> current;
  for (const auto& [id, wp] : plan_.workers) current[id] = wp.batch;
  switch (options_.policy) {
    case Policy::kOff:
      SetPlan(current, models);
      break;
    case Policy::kPaper:
      SetPlan(PaperRule(), models);
      break;
    case Policy::kOmniLearn:
      AdjustOmniLearn(current, before);
      break;
  }
  return plan_;
}

std::optional<double> BatchController::WindowThroughput(const std::map<WorkerId, int64_t>& current) const {
  const std::map<WorkerId, double> links = ChargedLinks();
  double slowest = 0;
  for (const auto& [id, w] : workers_) {
    const WorkerEstimator& e = w.estimator;
    if (!e.window_fresh() || e.last_window_batch() != current.at(id)) return std::nullopt;
    const double link = options_.balance == Balance::kIteration ? links.at(id) : 0;
    slowest = std::max(slowest, e.last_window_seconds() + link);
  }
  if (!(slowest > 0)) return std::nullopt;
  return static_cast<double>(FeasibleTotal()) / slowest;
}

bool BatchController::TimesAsBefore(const std::map<WorkerId, std::vector<Observation>>& before) const {
  for (const auto& [id, w] : workers_) {
    auto it = before.find(id);
    const bool one_batch = w.estimator.window_fresh() && w.estimator.last_window_batch() > 0;
    if (it == before.end() || it->second.empty() || !one_batch) return false;
    if (!HistoryPredicts(it->second, w.estimator.last_window_batch(), w.estimator.last_window_seconds(),
                         options_.change_threshold)) {
      return false;
    }
  }
  return true;
}

void BatchController::AdjustOmniLearn(const std::map<WorkerId, int64_t>& current,
                                      const std::map<WorkerId, std::vector<Observation>>& before) {
  auto models = Models();
  const double band = EffectiveDeadband(models);
  const std::optional<double> throughput = WindowThroughput(current);
  if (options_.revert_worse_plans && throughput && trial_.Measured(*throughput, band) == PlanTrial::Verdict::kWorse) {
    if (TimesAsBefore(trial_histories_)) {
      // Noise: the models from before the change predict this window; what the change
      // detector learnt from the burst goes, and so does the plan it made.
      for (auto& [id, w] : workers_) w.estimator.set_history(trial_histories_.at(id));
      trial_.Reverted();
      SetPlan(trial_.previous(), Models());
      plan_.reverted = true;
      ++plan_.reverts;
      return;
    }
    trial_.Kept();  // a real change: every plan is slower now
  }
  const auto candidate = SolveEqualTime(models);
  const double now = Spread(models, current);
  const double next = Spread(models, candidate);
  const bool adopt = now > 1 + band && now - next > band / 2;
  if (adopt && candidate != current && options_.revert_worse_plans) {
    trial_.Replaced(current, candidate);
    trial_histories_ = before;
  }
  SetPlan(adopt ? candidate : current, models);
}

}  // namespace controller
}  // namespace omnilearn
