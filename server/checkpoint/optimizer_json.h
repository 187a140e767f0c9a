// The job's optimizer in a checkpoint's metadata (JSON): what it runs (kind, rates, decays,
// hyperparameters, param groups), its per-group scalars and a worker's scheduler's rates,
// so that a restarted server steps on exactly as before.
#ifndef OMNILEARN_SERVER_CHECKPOINT_OPTIMIZER_JSON_H_
#define OMNILEARN_SERVER_CHECKPOINT_OPTIMIZER_JSON_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/data/parameter_store.h"

namespace omnilearn {
namespace server {

// The step's options (kind, learning_rate, weight_decay, momentum, beta1, beta2, eps,
// hyper, groups); the schedule and clipping are the flags'.
std::string OptimizerJson(const OptimizerOptions& o);
// OptimizerJson's inverse over `base` (its schedule and clipping stay). InvalidArgument
// for malformed JSON or an optimizer this release does not know.
absl::StatusOr<OptimizerOptions> ParseOptimizerJson(const std::string& text, OptimizerOptions base);

std::string ScalarsJson(const OptimizerScalars& scalars);
absl::StatusOr<OptimizerScalars> ParseScalarsJson(const std::string& text);  // "": none
std::string RatesJson(const std::vector<double>& rates);
absl::StatusOr<std::vector<double>> ParseRatesJson(const std::string& text);  // "": none

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CHECKPOINT_OPTIMIZER_JSON_H_
