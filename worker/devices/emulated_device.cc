#include "worker/devices/emulated_device.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace omnilearn {
namespace worker {
namespace {

constexpr char kFormat[] =
    "FIXED_MS:MS_PER_SAMPLE[:JITTER] (e.g. 2:0.5:0.05), or EPOCH@PROFILE,... (e.g. 0@2:0.5,1@2:4)";

absl::StatusOr<DeviceProfile> ParseProfile(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  DeviceProfile p;
  const bool parsed = (parts.size() == 2 || parts.size() == 3) && absl::SimpleAtod(parts[0], &p.fixed_ms) &&
                      absl::SimpleAtod(parts[1], &p.ms_per_sample) &&
                      (parts.size() == 2 || absl::SimpleAtod(parts[2], &p.jitter));
  if (!parsed) return absl::InvalidArgumentError(absl::StrCat("emulate_device: '", text, "' is not ", kFormat));
  if (!(p.fixed_ms >= 0) || !(p.ms_per_sample >= 0) || !std::isfinite(p.fixed_ms) || !std::isfinite(p.ms_per_sample) ||
      p.fixed_ms + p.ms_per_sample <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("emulate_device: '", text, "': times must be finite, >= 0 and not both 0"));
  }
  if (!(p.jitter >= 0 && p.jitter < 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat("emulate_device: '", text, "': JITTER must be in [0, 0.5)"));
  }
  return p;
}

}  // namespace

absl::StatusOr<EmulatedDevice> EmulatedDevice::Parse(const std::string& text, uint64_t seed) {
  EmulatedDevice d;
  d.rng_.seed(seed);
  if (text.find('@') == std::string::npos) {
    absl::StatusOr<DeviceProfile> p = ParseProfile(text);
    if (!p.ok()) return p.status();
    d.steps_.emplace_back(0, *p);
    return d;
  }
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, absl::MaxSplits('@', 1));
    double epoch = 0;
    if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &epoch)) {
      return absl::InvalidArgumentError(absl::StrCat("emulate_device: '", entry, "' is not EPOCH@PROFILE"));
    }
    if (d.steps_.empty() ? epoch != 0 : !(epoch > d.steps_.back().first)) {
      return absl::InvalidArgumentError(
          absl::StrCat("emulate_device: the schedule starts at epoch 0 and its epochs increase (at '", entry, "')"));
    }
    absl::StatusOr<DeviceProfile> p = ParseProfile(parts[1]);
    if (!p.ok()) return p.status();
    d.steps_.emplace_back(epoch, *p);
  }
  return d;
}

const DeviceProfile& EmulatedDevice::At(double epoch) const {
  const DeviceProfile* p = &steps_.front().second;
  for (const auto& [from, profile] : steps_) {
    if (epoch >= from) p = &profile;
  }
  return *p;
}

double EmulatedDevice::StepSeconds(int64_t batch, double epoch) {
  const DeviceProfile& p = At(epoch);
  double factor = 1;
  if (p.jitter > 0) factor = std::clamp(std::normal_distribution<double>(1.0, p.jitter)(rng_), 0.5, 1.5);
  return factor * (p.fixed_ms + p.ms_per_sample * static_cast<double>(batch)) / 1000;
}

PacedStep EmulatedDevice::Pace(const Clock& clock, absl::Time started, int64_t batch, double epoch) {
  PacedStep s;
  s.emulated_seconds = StepSeconds(batch, epoch);
  s.real_seconds = absl::ToDoubleSeconds(clock.Now() - started);
  s.overrun = s.real_seconds > s.emulated_seconds;
  if (!s.overrun) clock.SleepFor(absl::Seconds(s.emulated_seconds - s.real_seconds));
  return s;
}

}  // namespace worker
}  // namespace omnilearn
