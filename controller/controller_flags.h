// The batch controller's command-line flags, declared once for every binary that runs the
// controller (omnilearn_server, simulate), so their names, defaults and ranges agree.
// Only a main() calls this; library code takes ControllerOptions.
#ifndef OMNILEARN_CONTROLLER_CONTROLLER_FLAGS_H_
#define OMNILEARN_CONTROLLER_CONTROLLER_FLAGS_H_

#include "absl/status/statusor.h"
#include "controller/batch_controller.h"

namespace omnilearn {
namespace controller {

struct ControllerFlags {
  ControllerOptions options;  // --controller, --balance, --global_batch, --min_batch, --max_batch, --deadband
  int adjust_every = 10;      // --adjust_every: iterations between adjustments
};

// The flags' values, range-checked and parsed; InvalidArgument names the flag and what
// it takes.
absl::StatusOr<ControllerFlags> ControllerFromFlags();

}  // namespace controller
}  // namespace omnilearn

#endif  // OMNILEARN_CONTROLLER_CONTROLLER_FLAGS_H_
