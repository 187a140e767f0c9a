#include "worker/trainer/step_timing.h"

#include "absl/strings/str_format.h"

namespace omnilearn {
namespace worker {

absl::StatusOr<StepTiming> StepTiming::Create(const StepTimingOptions& o, const Clock* clock) {
  absl::StatusOr<SlowdownSchedule> slowdowns = SlowdownSchedule::Parse(o.slowdown_schedule, o.slowdown);
  if (!slowdowns.ok()) return slowdowns.status();
  StepTiming t(clock, std::move(*slowdowns));
  t.slowdown_ = o.slowdown;
  if (o.emulate_device.empty()) return t;
  if (o.slowdown != 1.0 || !o.slowdown_schedule.empty()) {
    return absl::InvalidArgumentError(
        "emulate_device sets the whole step time: leave slowdown and slowdown_schedule (real compute) out");
  }
  absl::StatusOr<EmulatedDevice> device = EmulatedDevice::Parse(o.emulate_device, o.seed);
  if (!device.ok()) return device.status();
  t.device_ = std::move(*device);
  return t;
}

std::string StepTiming::Follow(double epoch) {
  epoch_ = epoch;
  if (device_) {
    const DeviceProfile& p = device_->At(epoch);
    if (profile_ && *profile_ == p) return "";
    profile_ = p;
    return absl::StrFormat("emulated device %g ms + %g ms/sample, jitter %g, from epoch %.2f", p.fixed_ms,
                           p.ms_per_sample, p.jitter, epoch);
  }
  const double now = slowdowns_.At(epoch);
  if (now == slowdown_) return "";
  slowdown_ = now;
  return absl::StrFormat("slowdown %.2f from epoch %.2f", now, epoch);
}

void StepTiming::Start() { started_ = clock_->Now(); }

double StepTiming::Finish(int64_t batch) {
  if (device_) {
    const PacedStep s = device_->Pace(*clock_, started_, batch, epoch_);
    if (s.overrun) {
      ++overruns_;
      if (!warned_) {
        warned_ = true;
        warning_ = absl::StrFormat(
            "the real compute of a step (%.1f ms at batch %d) took longer than its emulated time (%.1f ms): the "
            "emulation is not faithful for such steps (counted in omnilearn_trainer_emulation_overruns_total); "
            "give the device a larger time per sample",
            1000 * s.real_seconds, batch, 1000 * s.emulated_seconds);
      }
      return s.real_seconds;  // the time it really took: the emulated one was not kept
    }
    return s.emulated_seconds;
  }
  const double real = absl::ToDoubleSeconds(clock_->Now() - started_);
  if (slowdown_ > 1.0) clock_->SleepFor(absl::Seconds((slowdown_ - 1.0) * real));
  return real * slowdown_;
}

std::optional<std::string> StepTiming::TakeOverrunWarning() {
  std::optional<std::string> w = std::move(warning_);
  warning_.reset();
  return w;
}

}  // namespace worker
}  // namespace omnilearn
