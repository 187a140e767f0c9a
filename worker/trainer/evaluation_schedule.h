// When the C++ worker evaluates: each `every_epochs` of global progress (1: at epoch
// ends), counted from where a joining worker finds the job, and once more when training
// is finished. Pure.
#ifndef OMNILEARN_WORKER_TRAINER_EVALUATION_SCHEDULE_H_
#define OMNILEARN_WORKER_TRAINER_EVALUATION_SCHEDULE_H_

#include <cstdint>

namespace omnilearn {
namespace worker {

class EvaluationSchedule {
 public:
  EvaluationSchedule(double every_epochs, int64_t dataset_size, uint64_t global_samples)
      : span_(every_epochs * static_cast<double>(dataset_size)),
        last_tick_(static_cast<int64_t>(static_cast<double>(global_samples) / span_)) {}
  // Whether to evaluate now, all workers having trained `global_samples`.
  bool Due(double global_samples, bool finished) {
    const int64_t tick = static_cast<int64_t>(global_samples / span_);
    if (!finished && tick <= last_tick_) return false;
    last_tick_ = tick;
    return true;
  }

 private:
  const double span_;
  int64_t last_tick_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_EVALUATION_SCHEDULE_H_
