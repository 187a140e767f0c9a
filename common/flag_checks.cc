#include "common/flag_checks.h"

#include <cmath>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace omnilearn {

void ShowOwnFlagsInHelp(std::string main_file) {
  absl::FlagsUsageConfig config;
  auto own = [main_file](absl::string_view file) { return absl::EndsWith(file, main_file); };
  config.contains_help_flags = own;
  config.contains_helpshort_flags = own;
  absl::SetFlagsUsageConfig(config);
}

absl::Status CheckFlagRanges(const std::vector<FlagRange>& ranges) {
  for (const FlagRange& r : ranges) {
    if (!(r.value >= r.lo && r.value <= r.hi)) {
      return absl::InvalidArgumentError(absl::StrCat("--", r.name, " must be in [", r.lo, ", ", r.hi, "], got ",
                                                     r.value));
    }
  }
  return absl::OkStatus();
}

}  // namespace omnilearn
