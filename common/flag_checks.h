// Command-line hygiene shared by the binaries: `--help` that lists the binary's own
// flags (absl only lists flags of a file named after the program by default), and range
// checks whose message names the flag and its valid range.
#ifndef OMNILEARN_COMMON_FLAG_CHECKS_H_
#define OMNILEARN_COMMON_FLAG_CHECKS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace omnilearn {

// `--help` and `--helpshort` list the flags defined in files ending with
// `main_file` (e.g. "server/main.cc"). Call before absl::ParseCommandLine.
void ShowOwnFlagsInHelp(std::string main_file);

// One numeric flag's value and its closed range [lo, hi].
struct FlagRange {
  const char* name;  // without the dashes
  double value;
  double lo;
  double hi;
};

// InvalidArgument for the first value out of its range (or NaN):
// "--port must be in [1, 65535], got 99999".
absl::Status CheckFlagRanges(const std::vector<FlagRange>& ranges);

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_FLAG_CHECKS_H_
