// The proportional batch controller: turns per-worker compute reports into a batch plan.
// It is the policy (when to re-plan, keep, revert, cap a worker's memory) over two parts:
// the estimator of each worker's time model (time_model.h) and the equal-time solver
// (equal_time_solver.h); which steps are learnt from is StepFilter's (step_filter.h).
//
// Pure library: no gRPC, no torch, no threads, no clock reads. Feed it reports, read a plan.
#ifndef OMNILEARN_CONTROLLER_BATCH_CONTROLLER_H_
#define OMNILEARN_CONTROLLER_BATCH_CONTROLLER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/worker_id.h"
#include "controller/equal_time_solver.h"
#include "controller/plan_trial.h"
#include "controller/step_filter.h"
#include "controller/time_model.h"

namespace omnilearn {
namespace controller {

enum class Policy {
  // Ours: per-worker affine time model t(b) = a + c*b fitted on smoothed times, an
  // equal-time solve for the whole plan, largest-remainder rounding, a dead-band on the
  // predicted spread, change detection for workers whose speed moved.
  kOmniLearn,
  // The paper's rule: b' = b * tbar / t_k, skipped when |b'/b - 1| <= paper_deadband.
  kPaper,
  // Equal static batches: the baseline every result is compared with.
  kOff,
};

absl::StatusOr<Policy> ParsePolicy(absl::string_view name);
std::string PolicyName(Policy policy);

// What kOmniLearn makes equal across workers.
enum class Balance {
  // Whole iterations: compute plus each worker's communication (its link time, learnt
  // from its reports), so a worker behind a slow link gets a smaller batch.
  kIteration,
  // Compute only (forward + loss + backward), as the paper does.
  kCompute,
};

absl::StatusOr<Balance> ParseBalance(absl::string_view name);
std::string BalanceName(Balance balance);

struct ControllerOptions {
  Policy policy = Policy::kOmniLearn;
  // kOmniLearn: equal iteration times (compute + link) or equal compute times.
  Balance balance = Balance::kIteration;
  // B: the sum of all live workers' batches (clamped to what the bounds allow).
  int64_t global_batch = 256;
  // Default per-worker bounds; AddWorker may narrow them.
  int64_t min_batch = 1;
  int64_t max_batch = 0;  // 0 = global_batch
  // kOmniLearn: a new plan is adopted only when the current plan's predicted spread
  // max(t)/min(t) exceeds 1 + d and the new plan improves it by d / 2, where
  // d = max(deadband, confidence * the spread's relative standard error): noisy or
  // few measurements widen the band, many narrow it.
  double deadband = 0.05;
  double confidence = 3.0;
  // kPaper: relative dead-band on a worker's batch change (0.2 in the authors' code).
  double paper_deadband = 0.2;
  // A worker whose mean time at an unchanged batch moved by more than this fraction
  // is taken to have changed speed: its older observations are discarded.
  double change_threshold = 0.25;
  // Samples an observation's running mean remembers at most (keeps it adaptive).
  double history_samples = 200;
  // Memory guard: growing a batch that lowered throughput by more than this fraction
  // (and by more than 3 standard errors of the measurements) caps the worker at the
  // smaller batch. Memory thrash costs far more than noise does.
  double throughput_drop = 0.25;
  // Out-of-memory at batch b caps the worker halfway between the largest batch known
  // to fit and b, and at most at floor(b * oom_backoff).
  double oom_backoff = 0.9;
  // Balance::kIteration: the link time of the worker with the fastest link is everyone's
  // baseline, and another worker's counts only by how far it exceeds (1 + link_band) x the
  // baseline. Queueing behind the others on a shared server link, or noise, is not a slower
  // link: equal links keep equal batches; a link truly slower still costs its worker samples.
  double link_band = 0.25;
  // kOmniLearn: a new plan whose first window of rounds delivers less throughput than the
  // plan before did (beyond the dead-band in force: PlanTrial) is reverted when the time
  // models from before the change predict that window (the workers run as before: the
  // change came from noise, a burst of slow steps), and the time histories from before the
  // change come back. A worker that really changed speed keeps the new plan.
  bool revert_worse_plans = true;
  // Which steps are learnt from (StepFilter): not a worker's warm-up, not an emulated
  // device's overrun, not an outlier against the worker's own recent steps.
  StepFilterOptions steps;
};

struct WorkerLimits {
  int64_t min_batch = 0;  // 0 = ControllerOptions::min_batch
  int64_t max_batch = 0;  // 0 = ControllerOptions::max_batch
};

// One iteration as the worker measured it.
struct ComputeReport {
  int64_t batch = 0;
  double compute_seconds = 0;  // forward + loss + backward
  // The worker's time on the link in an iteration: moving its gradient and its model, not
  // waiting for the others (0 = not known). It does not depend on the batch.
  double link_seconds = 0;
  // The worker's emulated device overran in this step: its time is the host's, not the device's.
  bool overran = false;
};

struct WorkerPlan {
  int64_t batch = 0;
  int64_t max_batch = 0;         // the current ceiling (memory guard included)
  double predicted_seconds = 0;  // 0 when the worker has no measurements yet (link included
                                 // with Balance::kIteration)
};

struct BatchPlan {
  std::map<WorkerId, WorkerPlan> workers;
  int64_t total = 0;        // sum of batches (== global batch when feasible)
  uint64_t adjustment = 0;  // how many times Adjust() ran
  uint64_t changes = 0;     // how many adjustments changed a batch
  bool changed = false;     // whether the last Adjust() changed a batch
  // The last Adjust() went back to the plan before (a new plan measured worse: PlanTrial),
  // and how many times that happened.
  bool reverted = false;
  uint64_t reverts = 0;
  double predicted_spread = 1.0;  // of the plan, by the controller's time model
  StepsSetAside set_aside;        // steps the workers' StepFilters did not learn from, by reason

  int64_t batch(WorkerId id) const;  // 0 for an unknown worker
};

// What the controller has learnt about one worker: its batch, its memory-guard ceiling
// and its time observations. A checkpoint keeps it by worker name, so a restarted server
// re-balances at once when the worker comes back instead of starting from equal batches.
struct WorkerMemory {
  int64_t batch = 0;
  int64_t guard_max = 0;  // 0 = none
  std::vector<Observation> history;
};

// Thread-compatible: callers serialize access (the server holds its own lock).
class BatchController {
 public:
  // Errors: InvalidArgument for inconsistent options (B < 1, bounds out of order, ...).
  static absl::StatusOr<BatchController> Create(const ControllerOptions& options);

  // Adds a worker; the plan is redistributed at once. AlreadyExists / InvalidArgument.
  absl::Status AddWorker(WorkerId id, WorkerLimits limits = {});
  // The same, starting from what an earlier controller learnt (Remember): its time model
  // and ceiling, and (kPaper) its batch. InvalidArgument for a memory that cannot be
  // real (non-positive or non-finite values, too many observations).
  absl::Status AddWorker(WorkerId id, WorkerLimits limits, const WorkerMemory& memory);
  // What the controller knows of a worker (reports not yet folded by Adjust are left
  // out). NotFound.
  absl::StatusOr<WorkerMemory> Remember(WorkerId id) const;
  // Removes a worker; its share goes to the others at once. NotFound.
  absl::Status RemoveWorker(WorkerId id);
  bool HasWorker(WorkerId id) const { return workers_.count(id) > 0; }
  size_t num_workers() const { return workers_.size(); }

  // Records one iteration. NotFound for an unknown worker; InvalidArgument for a
  // non-positive batch, a non-finite or non-positive compute time, or a non-finite or
  // negative link time.
  absl::Status Report(WorkerId id, const ComputeReport& report);
  // The worker ran out of memory at `batch`: its ceiling drops below it and the plan
  // is redistributed at once. NotFound / InvalidArgument.
  absl::Status ReportOutOfMemory(WorkerId id, int64_t batch);

  // Folds the reports since the last call into the time models and computes the next
  // plan according to the policy. Returns the plan now in force.
  const BatchPlan& Adjust();

  const BatchPlan& plan() const { return plan_; }
  const ControllerOptions& options() const { return options_; }

 private:
  struct Worker {
    int64_t min_batch = 1;
    int64_t max_batch = 1;                   // configured ceiling
    int64_t guard_max = 0;                   // memory-guard ceiling, 0 = none
    int64_t remembered_batch = 0;            // kPaper: its batch before a restart, until the next Adjust
    StepFilter filter{StepFilterOptions{}};  // which of its steps are learnt from
    WorkerEstimator estimator;               // its time model and link time
    int64_t ceiling() const { return guard_max > 0 && guard_max < max_batch ? guard_max : max_batch; }
  };

  explicit BatchController(const ControllerOptions& options) : options_(options) {}

  // Caps `w` at before.batch when growing to now.batch lowered its throughput.
  void ApplyMemoryGuard(Worker& w, const Observation& before, const Observation& now);
  // Every worker's time model; one not measured yet is taken to be typical of the others
  // (the medians), and with Balance::kIteration its charged link time is a fixed part.
  std::map<WorkerId, TimeModel> Models() const;
  // Balance::kIteration: the link time charged to each worker (see link_band).
  std::map<WorkerId, double> ChargedLinks() const;
  Bounds bounds() const;  // each worker's min and ceiling
  int64_t FeasibleTotal() const { return controller::FeasibleTotal(options_.global_batch, bounds()); }
  std::map<WorkerId, int64_t> SolveEqualTime(const std::map<WorkerId, TimeModel>& models) const {
    const Bounds b = bounds();
    return controller::SolveEqualTime(models, b, controller::FeasibleTotal(options_.global_batch, b));
  }
  std::map<WorkerId, int64_t> RoundToTotal(const std::map<WorkerId, double>& targets) const {
    const Bounds b = bounds();
    return controller::RoundToTotal(targets, b, controller::FeasibleTotal(options_.global_batch, b));
  }
  std::map<WorkerId, int64_t> PaperRule();
  // The dead-band in force: wider while the measurements are noisy or few.
  double EffectiveDeadband(const std::map<WorkerId, TimeModel>& models) const;
  bool PlanIsValid() const;
  void SetPlan(const std::map<WorkerId, int64_t>& batches, const std::map<WorkerId, TimeModel>& models);
  void Replan();  // forced redistribution (membership or ceilings changed)
  // kOmniLearn's step of Adjust: the trial's verdict on the window just folded, else the
  // equal-time plan when it beats the current one by the dead-band. `before`: the workers'
  // histories before this window was folded.
  void AdjustOmniLearn(const std::map<WorkerId, int64_t>& current,
                       const std::map<WorkerId, std::vector<Observation>>& before);
  // Samples per second of the window just folded, when every worker reported in it at its
  // batch of `current`: the global batch over the slowest worker's time (link included
  // with Balance::kIteration).
  std::optional<double> WindowThroughput(const std::map<WorkerId, int64_t>& current) const;
  // Whether the time models fitted on `before` predict every worker's window just folded
  // (within change_threshold): the workers run as they did before.
  bool TimesAsBefore(const std::map<WorkerId, std::vector<Observation>>& before) const;

  ControllerOptions options_;
  std::map<WorkerId, Worker> workers_;
  BatchPlan plan_;
  PlanTrial trial_;
  // The workers' histories before the window that led to the plan on trial.
  std::map<WorkerId, std::vector<Observation>> trial_histories_;
};

}  // namespace controller
}  // namespace omnilearn

#endif  // OMNILEARN_CONTROLLER_BATCH_CONTROLLER_H_
