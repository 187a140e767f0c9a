// How a training step's compute time is taken and reported: as measured, slowed down
// (--slowdown, --slowdown_schedule: the worker sleeps (F - 1) x its real time and reports F
// times it) or emulated (--emulate_device: the step takes the device profile's time, see
// emulated_device.h). The trainer calls Follow, Start, then Finish around forward + loss +
// backward; all waiting is on the injected clock.
#ifndef OMNILEARN_WORKER_TRAINER_STEP_TIMING_H_
#define OMNILEARN_WORKER_TRAINER_STEP_TIMING_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/devices/emulated_device.h"
#include "worker/devices/slowdown.h"

namespace omnilearn {
namespace worker {

struct StepTimingOptions {
  double slowdown = 1.0;          // constant factor >= 1 (before the schedule's first entry)
  std::string slowdown_schedule;  // EPOCH:FACTOR,... (slowdown.h)
  std::string emulate_device;     // empty = real compute; else emulated_device.h's form
  uint64_t seed = 1;              // the emulated jitter's
};

// Thread-compatible: one training loop owns it.
class StepTiming {
 public:
  // InvalidArgument for a malformed schedule or device, or for an emulated device with a
  // slowdown (the emulation sets the whole step time; a slowdown is for real compute).
  static absl::StatusOr<StepTiming> Create(const StepTimingOptions& options, const Clock* clock);

  // Sets the global epoch of the next step. Returns a line to log when the factor or the
  // device profile changed with it (empty otherwise; the first call reports an emulated
  // device's profile, a constant slowdown says nothing).
  std::string Follow(double epoch);
  // The step's compute starts now.
  void Start();
  // The compute of a step of `batch` samples is done: waits as the mode requires and
  // returns the seconds to report.
  double Finish(int64_t batch);

  // Whether Finish waits after the real compute (an emulated device, a slowdown): such a
  // step's gradient is ready only after that wait, as it would be from the device emulated.
  bool waits() const { return device_.has_value() || slowdown_ > 1; }
  // Emulated steps whose real compute took longer than their emulated time.
  uint64_t overruns() const { return overruns_; }
  // After the first overrun, once: a warning with both figures (nullopt otherwise).
  std::optional<std::string> TakeOverrunWarning();

 private:
  StepTiming(const Clock* clock, SlowdownSchedule slowdowns) : clock_(clock), slowdowns_(std::move(slowdowns)) {}

  const Clock* clock_;
  SlowdownSchedule slowdowns_;
  std::optional<EmulatedDevice> device_;
  double epoch_ = 0;
  double slowdown_ = 1;
  std::optional<DeviceProfile> profile_;  // the emulated profile last reported by Follow
  absl::Time started_;
  uint64_t overruns_ = 0;
  bool warned_ = false;
  std::optional<std::string> warning_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_STEP_TIMING_H_
