// A worker's own Prometheus series (omnilearn_trainer_*, label worker), one set for both
// languages: the C++ trainer feeds it, and Python workers feed the same class through
// omnilearn._core.WorkerMetrics. A figure that does not exist yet (the batch and loss
// before the first push, the test accuracy before a report) is absent, not 0.
#ifndef OMNILEARN_WORKER_TRAINER_TRAINER_METRICS_H_
#define OMNILEARN_WORKER_TRAINER_TRAINER_METRICS_H_

#include <cstdint>
#include <string>

#include "common/metrics.h"

namespace omnilearn {
namespace worker {

// Thread-safe (the registry's series are).
class TrainerMetrics {
 public:
  // Series in `registry` (null: nothing is recorded), labelled with the worker's `name`.
  TrainerMetrics(metrics::Registry* registry, const std::string& name);

  // One step's compute time and loss, as the worker reports them.
  void Step(double compute_seconds, double loss);
  // One iteration's push-to-reply time.
  void Communication(double seconds);
  // An iteration pushed at `batch`: its samples trained unless it ran out of memory.
  void Pushed(int64_t batch, bool out_of_memory);
  // All of one iteration: Pushed, Communication and, unless out of memory, Step.
  void Iteration(int64_t batch, double step_seconds, double comm_seconds, double loss, bool out_of_memory);
  void Accuracy(double accuracy);
  // Running totals the worker keeps: the series follow them.
  void EmulationOverruns(uint64_t total);
  void Rejoins(uint64_t total);

 private:
  static void RaiseTo(metrics::Counter* c, uint64_t total);

  std::string name_;
  metrics::Histogram *step_ = nullptr, *comm_ = nullptr;
  metrics::Family<metrics::Gauge>*batch_ = nullptr, *loss_ = nullptr, *accuracy_ = nullptr;
  metrics::Counter *iterations_ = nullptr, *samples_ = nullptr, *oom_ = nullptr, *overruns_ = nullptr,
                   *rejoins_ = nullptr;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_TRAINER_METRICS_H_
