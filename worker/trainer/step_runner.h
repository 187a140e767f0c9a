// The device work of training: one step's compute (StepRunner) and an evaluation, on
// what a run trains with (TrainingSetup). Knows nothing of the server: a step's gradient
// goes into the caller's buffer, each parameter announced as backward makes it final.
#ifndef OMNILEARN_WORKER_TRAINER_STEP_RUNNER_H_
#define OMNILEARN_WORKER_TRAINER_STEP_RUNNER_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "worker/trainer/dataset.h"
#include "worker/trainer/flat_model.h"
#include "worker/trainer/model.h"
#include "worker/trainer/progress_reporter.h"
#include "worker/trainer/step_timing.h"
#include "worker/trainer/trainer_metrics.h"

namespace omnilearn {
namespace worker {

// What a run trains with, set up before it joins: the device, the data and the model.
struct TrainingSetup {
  torch::Device device{torch::kCPU};
  Dataset train, test;
  std::unique_ptr<Model> model;
};

// The share of `test` the model classifies right, in batches of 1000, in eval mode (the
// model is back in training mode after).
double Evaluate(Model* model, const Dataset& test, const torch::Device& device);

struct StepResult {
  double compute_seconds = 0;
  double loss = 0;
  bool out_of_memory = false;
};

// One step's compute: the batch gathered onto the device (on a GPU straight into reused
// pinned buffers, copied asynchronously: one host copy, covered by the wait before the
// timed step), an untimed warm-up at each new batch size when asked (the first steps of a
// shape on a GPU would show the controller times that are not the worker's), then the
// timed forward + loss + backward, its gradient into the push buffer. Running out of
// device memory is a result, not an error.
class StepRunner {
 public:
  // All pointers must outlive the runner. `warmup`: an untimed step at each new batch size.
  StepRunner(bool warmup, TrainingSetup* setup, FlatModel* params, StepTiming* timing, TrainerMetrics* series,
             const ProgressReporter* progress);

  // Trains the samples `idx` (`batch` of them); the gradient lands in `grad` (sized to the
  // model, layout order). `ready` (may be empty) is told each layout index as backward
  // makes its gradient final, its values already in `grad`: buckets may leave while
  // backward goes on. Buffers and what backward did not reach are copied after, unannounced.
  StepResult Run(const torch::Tensor& idx, int64_t batch, std::vector<float>* grad,
                 const std::function<void(int)>& ready);

 private:
  std::pair<torch::Tensor, torch::Tensor> Gather(const torch::Tensor& idx, int64_t batch);

  const ProgressReporter* const progress_;
  const bool warmup_;
  TrainingSetup* const setup_;
  FlatModel* const params_;
  StepTiming* const timing_;
  TrainerMetrics* const series_;
  int64_t warm_batch_ = -1;
  torch::Tensor stage_x_, stage_y_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_STEP_RUNNER_H_
