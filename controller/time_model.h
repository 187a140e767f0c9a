// The controller's estimator: what one worker's measured steps say about its speed. Its
// step times are pooled by batch size (Observation), folded a window at a time into a short
// history, and fitted as t(b) = a + c*b (TimeModel); its link time is learnt apart (the median
// of recent ones).
//
// Pure library: no clock, no threads. The policy (batch_controller.h) decides what to do
// with the models; the solver (equal_time_solver.h) turns them into batches.
#ifndef OMNILEARN_CONTROLLER_TIME_MODEL_H_
#define OMNILEARN_CONTROLLER_TIME_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

namespace omnilearn {
namespace controller {

// Observations a worker's history keeps (distinct batch sizes, newest last).
inline constexpr size_t kMaxObservations = 4;

// A worker's step times at one batch size, pooled (Welford): what its time model is fitted
// on, and what a checkpoint keeps of it.
struct Observation {
  int64_t batch = 0;
  double mean_seconds = 0;
  double samples = 0;
  double m2 = 0;                 // sum of squared deviations from the mean
  double RelativeError() const;  // of mean_seconds
};

// A worker's time per iteration at batch b: a + c*b.
struct TimeModel {
  double a = 0;  // fixed seconds per iteration
  double c = 0;  // seconds per sample
  bool measured = false;
  double relative_error = 0;  // standard error of the model's times, relative
  double Seconds(double batch) const { return a + c * batch; }
};

// The model of a history, pooled over every observation and weighted by samples:
// proportional (t = c*b) when the batches are too close together to tell a fixed part,
// else weighted least squares, the fixed part kept within [0, 0.9 x the fastest time].
// Not measured for an empty history.
TimeModel FitTimeModel(const std::vector<Observation>& history);
// The times a (non-empty) history predicts at `batch`, lowest and highest: its model's, or,
// when its batches were too close together to tell a fixed part (the model proportional),
// every time from no fixed part to the largest (0.9 x the fastest time). A round of local
// steps has a fixed part per step: at a batch far below the history's it takes more than a
// proportional model says, and that is no change of speed.
std::pair<double, double> PredictedSeconds(const std::vector<Observation>& history, int64_t batch);
// Whether `seconds` at `batch` is within `tolerance` (a fraction) of what a non-empty history
// predicts (PredictedSeconds).
bool HistoryPredicts(const std::vector<Observation>& history, int64_t batch, double seconds, double tolerance);

struct EstimatorOptions {
  // A mean time at an unchanged batch that moved by more than this fraction means the
  // worker changed speed: the older observations go.
  double change_threshold = 0.25;
  // Samples an observation's running mean remembers at most (keeps it adaptive).
  double history_samples = 200;
};

// One worker's estimator. Thread-compatible.
class WorkerEstimator {
 public:
  explicit WorkerEstimator(EstimatorOptions options = {}) : options_(options) {}

  // A step to learn from (what the worker's StepFilter kept), into the window.
  void AddStep(int64_t batch, double seconds);
  // A link time reported (> 0), into the window.
  void AddLink(double seconds);

  // A new batch whose time the history did not predict (off by more than twice the
  // change threshold): the history went. `before` is the newest observation it held.
  struct Surprise {
    Observation before, now;
  };
  // Folds the window into the history and the link time: an observation at a batch seen
  // before is merged (or, changed beyond the threshold, starts the history over); one at a
  // new batch is appended (the oldest beyond kMaxObservations dropped). Returns the
  // surprises, for the memory guard to judge before their history is forgotten.
  std::vector<Surprise> Fold();

  TimeModel Fit() const { return FitTimeModel(history_); }
  const std::vector<Observation>& history() const { return history_; }
  void set_history(std::vector<Observation> history) { history_ = std::move(history); }
  // Forgets the observations above `batch` (they describe a state that no longer exists).
  void DropAbove(int64_t batch);

  // The last fold's window: whether it had steps, their mean time, and their batch (0
  // when they were at several).
  bool window_fresh() const { return window_fresh_; }
  double last_window_seconds() const { return last_window_seconds_; }
  int64_t last_window_batch() const { return last_window_batch_; }

  bool link_known() const { return !links_.empty(); }
  double link_seconds() const { return link_seconds_; }  // the recent ones' median; valid when link_known()

 private:
  struct Window {
    double sum = 0;
    double sum_squares = 0;
    int count = 0;
  };
  // Merges one window observation into the history.
  void Merge(Observation fresh, std::vector<Surprise>* surprises);
  void FoldLink();

  EstimatorOptions options_;
  std::map<int64_t, Window> window_;  // steps since the last fold, by batch
  std::vector<Observation> history_;  // newest last, distinct batches
  bool window_fresh_ = false;
  double last_window_seconds_ = 0;
  int64_t last_window_batch_ = 0;
  std::vector<double> link_window_;  // link times since the last fold
  std::deque<double> links_;         // the recent ones folded, newest last
  double link_seconds_ = 0;
};

}  // namespace controller
}  // namespace omnilearn

#endif  // OMNILEARN_CONTROLLER_TIME_MODEL_H_
