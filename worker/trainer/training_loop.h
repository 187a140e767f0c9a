// The loop after the join: the facade that holds the order of a step (samples, compute,
// push and pull, evaluation) while its parts hold the rules (SampleSource, StepRunner,
// Session, EvaluationSchedule, SampleLog).
#ifndef OMNILEARN_WORKER_TRAINER_TRAINING_LOOP_H_
#define OMNILEARN_WORKER_TRAINER_TRAINING_LOOP_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/client/session.h"
#include "worker/trainer/evaluation_schedule.h"
#include "worker/trainer/flat_model.h"
#include "worker/trainer/local_round.h"
#include "worker/trainer/progress_reporter.h"
#include "worker/trainer/samples.h"
#include "worker/trainer/step_runner.h"
#include "worker/trainer/step_timing.h"
#include "worker/trainer/trainer.h"
#include "worker/trainer/trainer_metrics.h"

namespace omnilearn {
namespace worker {

class TrainingLoop {
 public:
  // `session` has joined; `weights` are the values the worker joined with. `local`: the
  // rounds of the job's local steps (null without them). All pointers must outlive the loop.
  TrainingLoop(const TrainerOptions& o, TrainingSetup* setup, FlatModel* params, StepTiming* timing, Session* session,
               TrainerMetrics* series, const ProgressReporter* progress, std::vector<float> weights,
               LocalRound* local = nullptr);

  // Trains until the job's epochs or max_iterations, a stop from the server, or an
  // interrupt (Cancelled, after leaving unfinished); then saves the module when asked and
  // leaves the job.
  absl::StatusOr<TrainerResult> Run();

 private:
  void Record(int64_t it, int64_t batch, const StepResult& step, const Assignment& spans, const PushReply& reply,
              bool model_changed, double comm_seconds);
  // The step's compute: one step, or a round of local steps.
  StepResult Compute(const torch::Tensor& idx, int64_t batch, StreamedPush* push);
  absl::Status Pull();
  absl::StatusOr<bool> Idle();
  void FollowSchedules();
  absl::StatusOr<PushOutcome> Exchange(int64_t batch, const StepResult& step, std::unique_ptr<StreamedPush> push,
                                       PushReply* reply, bool* changed);
  StepReport PushFor(int64_t batch) const;
  void EvaluateAt(double global);
  absl::Status ReportFinalAccuracy(double loss);
  absl::StatusOr<TrainerResult> Finish(bool finished);

  const TrainerOptions& o_;
  const ProgressReporter* const progress_;
  TrainingSetup* const setup_;
  FlatModel* const params_;
  StepTiming* const timing_;
  Session* const session_;
  TrainerMetrics* const series_;
  // Null without local steps. With them, the parameters hold the round's steps until its
  // reply, and weights_ the server's model, which every round starts from.
  LocalRound* const local_;
  std::vector<float> weights_;
  std::vector<float> grad_;  // the push buffer, reused from step to step
  SampleSource samples_;
  StepRunner runner_;
  EvaluationSchedule evaluations_;
  SampleLog sample_log_;
  double last_comm_seconds_ = 0;  // the last iteration's, from the end of compute to the reply
  std::optional<double> pending_accuracy_;
  TrainerResult result_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_TRAINING_LOOP_H_
