// Runs a BatchController against simulated workers. Used by //controller:simulate and the
// controller's tests, so what users see is what is tested.
#ifndef OMNILEARN_CONTROLLER_SIMULATION_H_
#define OMNILEARN_CONTROLLER_SIMULATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "controller/batch_controller.h"

namespace omnilearn {
namespace controller {

// From adjustment round `round` on, worker `worker` runs at `speed`.
struct SpeedChange {
  int round = 0;
  int worker = 0;
  double speed = 1;
};

struct SimulationOptions {
  std::vector<double> speeds;        // relative speeds; speed 1 = `samples_per_second`
  double samples_per_second = 1000;  // of a speed-1 worker
  double noise = 0.05;               // relative standard deviation of each measured time
  double overhead_seconds = 0;       // fixed per-iteration cost of every worker
  // Per worker: seconds on its link per iteration (its gradient out, the model back),
  // whatever the batch; reported to the controller with the same relative noise. Empty =
  // none.
  std::vector<double> link_seconds;
  int rounds = 20;                    // adjustments to run
  int iterations_per_adjustment = 5;  // reports each worker sends between adjustments
  std::vector<SpeedChange> schedule;
  // Per worker: batches above this run out of memory (0 = no limit).
  std::vector<int64_t> oom_batches;
  uint64_t seed = 1;
  // What hosts do that devices do not (drawn from a random stream of their own):
  // each worker's first step takes this many times its time (compilation, caches; 1: none),
  double first_step_factor = 1;
  // and, per worker, this probability that a step is slowed `load_factor` times by its host
  // (a server beside it taking the cores). Such a step overran its emulated device and says
  // so when `load_overruns`. Empty: no load.
  std::vector<double> load_probability;
  double load_factor = 3;
  bool load_overruns = true;
  ControllerOptions controller;
};

// Row r describes the iterations of round r, run with the batches in force then
// (row 0 = the initial plan); `changed` says whether the adjustment after them changed
// the plan.
struct SimulationRound {
  int round = 0;
  std::vector<int64_t> batches;
  std::vector<double> measured_seconds;        // mean over the round's iterations, noise included
  std::vector<double> true_seconds;            // noise-free compute time at the batch
  std::vector<double> true_iteration_seconds;  // true_seconds plus the link time
  double measured_spread = 1;                  // max/min of measured_seconds
  double true_spread = 1;                      // max/min of true_seconds
  double true_iteration_spread = 1;            // max/min of true_iteration_seconds
  bool changed = false;
};

absl::StatusOr<std::vector<SimulationRound>> Simulate(const SimulationOptions& options);

// "1,1,2,4" -> {1,1,2,4}; every value must be > 0 (>= 0 with allow_zero).
absl::StatusOr<std::vector<double>> ParseSpeeds(absl::string_view text, bool allow_zero = false);
// "20:3:0.25,40:3:1" -> round:worker:speed triples.
absl::StatusOr<std::vector<SpeedChange>> ParseSchedule(absl::string_view text);

}  // namespace controller
}  // namespace omnilearn

#endif  // OMNILEARN_CONTROLLER_SIMULATION_H_
