#include "common/training_mode.h"

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

}  // namespace omnilearn
