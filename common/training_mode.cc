#include "common/training_mode.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace omnilearn {

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kSync:
      return "sync";
    case Mode::kAsync:
      return "async";
    case Mode::kSsp:
      return "ssp";
  }
  return "unknown";
}

absl::StatusOr<Mode> ParseMode(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  for (Mode m : {Mode::kSync, Mode::kAsync, Mode::kSsp}) {
    if (n == ModeName(m)) return m;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown mode '", name, "' (want sync, async or ssp)"));
}

int64_t LocalRoundSteps(int64_t batch, int local_steps, int64_t local_batch) {
  const int64_t steps = local_batch > 0 ? (batch + local_batch - 1) / local_batch : local_steps;
  return std::max<int64_t>(1, std::min<int64_t>(steps, batch));
}

}  // namespace omnilearn
