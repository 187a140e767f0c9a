// Command-line hygiene shared by the binaries: `--help` that lists the binary's own
// flags (absl only lists flags of a file named after the program by default), and range
// checks whose message names the flag and its valid range.
#ifndef OMNILEARN_COMMON_FLAG_CHECKS_H_
#define OMNILEARN_COMMON_FLAG_CHECKS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace omnilearn {

// `--help` and `--helpshort` list the flags defined in files ending with one of `files`
// (e.g. "server/daemon/flags.cc"). Call before absl::ParseCommandLine.
void ShowOwnFlagsInHelp(std::vector<std::string> files);

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

// A flag renamed, its old name kept as a deprecated alias for one release: the old
// flag's value when it was given (with a warning naming the new flag, on stderr), else
// the new flag's `value`.
double RenamedFlag(const char* old_name, const std::optional<double>& old_value, const char* new_name, double value);

// The known name nearest to `name` by edit distance (a typo's likely meaning), or "" when
// none is close (more than a third of the name, at least 2, would have to change).
std::string NearestName(absl::string_view name, const std::vector<std::string>& known);

// The error for the first flag on the command line this program does not know, with the
// nearest known flag as a suggestion; "" when every flag is known. Call before
// absl::ParseCommandLine (which refuses it without a suggestion).
std::string UnknownFlagError(int argc, char** argv);
// UnknownFlagError's message on stderr and exit(1), if there is one.
void RefuseUnknownFlags(int argc, char** argv);

// Flags left out of the command line take their value from an environment variable
// when it is set, e.g. {"server", "OMNILEARN_SERVER"}. InvalidArgument when a value does
// not parse.
struct FlagFromEnv {
  const char* flag;
  const char* variable;
};
absl::Status FlagsFromEnvironment(int argc, char** argv, const std::vector<FlagFromEnv>& pairs);
}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_FLAG_CHECKS_H_
