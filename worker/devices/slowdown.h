// Heterogeneity emulation that changes with time: --slowdown_schedule=EPOCH:FACTOR,...
// gives the slowdown factor from each global epoch on (the epoch the server reports, so
// every worker of a job changes at the same point of training, without restarts).
#ifndef OMNILEARN_WORKER_DEVICES_SLOWDOWN_H_
#define OMNILEARN_WORKER_DEVICES_SLOWDOWN_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace omnilearn {
namespace worker {

class SlowdownSchedule {
 public:
  // "0:1,2:4,4.5:2": factor 1 from epoch 0, 4 from epoch 2, 2 from epoch 4.5. An empty
  // text is a constant `base`. InvalidArgument for a malformed entry, an epoch < 0 or not
  // increasing, a factor < 1.
  static absl::StatusOr<SlowdownSchedule> Parse(const std::string& text, double base);
  // The factor at global epoch `epoch` (the base before the first entry).
  double At(double epoch) const;
  bool constant() const { return steps_.empty(); }

 private:
  double base_ = 1;
  std::vector<std::pair<double, double>> steps_;  // (epoch, factor), epochs increasing
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_DEVICES_SLOWDOWN_H_
