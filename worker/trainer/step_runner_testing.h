// What a test of one step's compute runs on: a small MLP (seed 3) on synthetic data on the
// CPU, its flat view, a real-clock timing and the progress notes it wrote.
#ifndef OMNILEARN_WORKER_TRAINER_STEP_RUNNER_TESTING_H_
#define OMNILEARN_WORKER_TRAINER_STEP_RUNNER_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "worker/trainer/step_runner.h"

namespace omnilearn {
namespace worker {

struct StepRig {
  StepRig() : timing(*StepTiming::Create(StepTimingOptions{}, Clock::Real())), series(nullptr, "t0") {
    setup.train = MakeSynthetic(100, 7);
    setup.test = MakeSynthetic(10, 8);
    setup.model = *MakeModel("mlp", 3);
    params = std::make_unique<FlatModel>(setup.model.get());
    layout = *params->Layout();
  }
  TrainingSetup setup;
  std::unique_ptr<FlatModel> params;
  ModelLayout layout;
  StepTiming timing;
  TrainerMetrics series;
  std::vector<std::string> notes;
  ProgressReporter progress{"t0", 0, [this](const std::string& line) { notes.push_back(line); }};
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_STEP_RUNNER_TESTING_H_
