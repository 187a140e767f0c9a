// An emulated device: every training step takes FIXED + MS_PER_SAMPLE x batch milliseconds
// of wall time (times a per-step normal factor of relative standard deviation JITTER), so
// workers on one machine have the speeds of a cluster's devices and their times do not
// depend on what the other workers compute at the same moment. The real forward, loss and
// backward still run on the real model and data; the worker then waits out the rest of the
// emulated time, and reports the emulated time as its compute time.
//
//   --emulate_device=2:0.5:0.05              2 ms + 0.5 ms per sample, 5% jitter
//   --emulate_device=0@2:0.5,1.5@2:4:0.05    from global epoch 1.5 on, 4 ms per sample
//
// The schedule form changes the profile with the global epoch the server reports, as
// --slowdown_schedule does, so every worker of a job changes at the same point of training.
#ifndef OMNILEARN_WORKER_DEVICES_EMULATED_DEVICE_H_
#define OMNILEARN_WORKER_DEVICES_EMULATED_DEVICE_H_

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace omnilearn {
namespace worker {

struct DeviceProfile {
  double fixed_ms = 0;       // per step, whatever the batch
  double ms_per_sample = 0;  // per sample of the batch
  double jitter = 0;         // relative standard deviation of a step's time

  bool operator==(const DeviceProfile& o) const {
    return fixed_ms == o.fixed_ms && ms_per_sample == o.ms_per_sample && jitter == o.jitter;
  }
};

// A step as paced: what the worker reports, what really ran, and whether the real compute
// overran the emulated time (the emulation is then not faithful for that step).
struct PacedStep {
  double emulated_seconds = 0;
  double real_seconds = 0;
  bool overrun = false;
};

// Thread-compatible: one training loop owns it.
class EmulatedDevice {
 public:
  // "FIXED_MS:MS_PER_SAMPLE[:JITTER]", or a schedule "EPOCH@PROFILE,EPOCH@PROFILE,..."
  // whose first entry is at epoch 0 and whose epochs increase. InvalidArgument for a
  // malformed entry, a negative value, a step time of 0 for every batch (FIXED and
  // MS_PER_SAMPLE both 0), or JITTER >= 0.5 (a step time could not stay positive).
  // `seed` seeds the jitter, so two workers of a job draw different noise.
  static absl::StatusOr<EmulatedDevice> Parse(const std::string& text, uint64_t seed);

  // The profile in force at global epoch `epoch`.
  const DeviceProfile& At(double epoch) const;
  // The emulated seconds of one step of `batch` samples at global epoch `epoch`: the
  // profile's time times a normal factor (mean 1, sd JITTER, clamped to [0.5, 1.5]).
  double StepSeconds(int64_t batch, double epoch);
  // Paces a step that started at `started` (on `clock`): draws its emulated time, then
  // sleeps on `clock` for what the real compute left of it.
  PacedStep Pace(const Clock& clock, absl::Time started, int64_t batch, double epoch);

 private:
  std::vector<std::pair<double, DeviceProfile>> steps_;  // (from epoch, profile), epochs increasing
  std::mt19937_64 rng_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_DEVICES_EMULATED_DEVICE_H_
