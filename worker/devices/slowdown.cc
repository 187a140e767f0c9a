#include "worker/devices/slowdown.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace omnilearn {
namespace worker {

absl::StatusOr<SlowdownSchedule> SlowdownSchedule::Parse(const std::string& text, double base) {
  if (!(base >= 1)) return absl::InvalidArgumentError("slowdown must be >= 1");
  SlowdownSchedule s;
  s.base_ = base;
  if (text.empty()) return s;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    double epoch = 0, factor = 0;
    if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &epoch) || !absl::SimpleAtod(parts[1], &factor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("slowdown_schedule: '", entry, "' is not EPOCH:FACTOR (e.g. 0:1,2:4,4:2)"));
    }
    if (!(epoch >= 0) || (!s.steps_.empty() && !(epoch > s.steps_.back().first))) {
      return absl::InvalidArgumentError(
          absl::StrCat("slowdown_schedule: epochs must be >= 0 and increasing (at '", entry, "')"));
    }
    if (!(factor >= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("slowdown_schedule: factor must be >= 1 (at '", entry, "')"));
    }
    s.steps_.emplace_back(epoch, factor);
  }
  return s;
}

double SlowdownSchedule::At(double epoch) const {
  double factor = base_;
  for (const auto& [from, f] : steps_) {
    if (epoch >= from) factor = f;
  }
  return factor;
}

}  // namespace worker
}  // namespace omnilearn
