// The controller's solver: integer batches for the workers, within each worker's bounds and
// summing to the global batch, with equal predicted iteration times under their time models
// (time_model.h). Pure functions: the policy (batch_controller.h) decides when to use them.
#ifndef OMNILEARN_CONTROLLER_EQUAL_TIME_SOLVER_H_
#define OMNILEARN_CONTROLLER_EQUAL_TIME_SOLVER_H_

#include <cstdint>
#include <map>

#include "common/worker_id.h"
#include "controller/time_model.h"

namespace omnilearn {
namespace controller {

// A worker's batch bounds, 1 <= min <= max.
struct BatchBounds {
  int64_t min = 1;
  int64_t max = 1;
};
using Bounds = std::map<WorkerId, BatchBounds>;

// The global batch clamped to what the bounds allow: [sum of minima, sum of maxima].
int64_t FeasibleTotal(int64_t global_batch, const Bounds& bounds);

// Real targets (one per worker of `bounds`) clamped to the bounds, floored, then single
// samples handed out (or taken back) by largest (smallest) remainder until they sum to
// `total`, which must be feasible.
std::map<WorkerId, int64_t> RoundToTotal(const std::map<WorkerId, double>& targets, const Bounds& bounds,
                                         int64_t total);

// The batches that give every worker the same predicted time T (found by bisection: the
// batches at T grow with T), within bounds, rounded to `total`. `models` holds a model
// with c > 0 for every worker of `bounds`.
std::map<WorkerId, int64_t> SolveEqualTime(const std::map<WorkerId, TimeModel>& models, const Bounds& bounds,
                                           int64_t total);

// max(t) / min(t) of the predicted times of `batches` over the measured models; 1 with
// fewer than two measured.
double Spread(const std::map<WorkerId, TimeModel>& models, const std::map<WorkerId, int64_t>& batches);

}  // namespace controller
}  // namespace omnilearn

#endif  // OMNILEARN_CONTROLLER_EQUAL_TIME_SOLVER_H_
