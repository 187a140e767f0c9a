#include "common/flag_checks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace omnilearn {

void ShowOwnFlagsInHelp(std::vector<std::string> files) {
  absl::FlagsUsageConfig config;
  auto own = [files](absl::string_view file) {
    for (const std::string& f : files) {
      if (absl::EndsWith(file, f)) return true;
    }
    return false;
  };
  config.contains_help_flags = own;
  config.contains_helpshort_flags = own;
  absl::SetFlagsUsageConfig(config);
}

absl::Status CheckFlagRanges(const std::vector<FlagRange>& ranges) {
  for (const FlagRange& r : ranges) {
    if (!(r.value >= r.lo && r.value <= r.hi)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", r.name, " must be in [", r.lo, ", ", r.hi, "], got ", r.value));
    }
  }
  return absl::OkStatus();
}

namespace {

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The flag's name in a command-line argument ("--name=value", "-name", "--noname"), or
// "" for anything else.
absl::string_view FlagName(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "-")) return "";
  absl::ConsumePrefix(&arg, "-");
  return arg.substr(0, arg.find('='));
}

bool Known(absl::string_view name) {
  // absl::ParseCommandLine's own, not all of them found by FindCommandLineFlag.
  for (absl::string_view builtin : {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch", "version",
                                    "only_check_args", "flagfile", "fromenv", "tryfromenv", "undefok"}) {
    if (name == builtin) return true;
  }
  if (absl::FindCommandLineFlag(name) != nullptr) return true;
  // --nofoo sets a boolean --foo to false.
  return absl::ConsumePrefix(&name, "no") && absl::FindCommandLineFlag(name) != nullptr;
}

bool OnCommandLine(int argc, char** argv, absl::string_view flag) {
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;
    absl::string_view name = FlagName(argv[i]);
    if (name == flag || (absl::ConsumePrefix(&name, "no") && name == flag)) return true;
  }
  return false;
}

}  // namespace

std::string NearestName(absl::string_view name, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& k : known) {
    const size_t d = EditDistance(name, k);
    if (d < best_distance || (d == best_distance && !best.empty() && k < best)) {
      if (d < best_distance) best_distance = d;
      best = k;
    }
  }
  return best;
}

std::string UnknownFlagError(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;
    const absl::string_view name = FlagName(argv[i]);
    if (name.empty() || Known(name)) continue;
    std::vector<std::string> known;
    for (const auto& [flag_name, flag] : absl::GetAllFlags()) known.emplace_back(flag_name);
    const std::string nearest = NearestName(name, known);
    return absl::StrCat("Unknown command line flag '", name, "'",
                        nearest.empty() ? "" : absl::StrCat(". Did you mean '--", nearest, "'?"),
                        " (--help lists the flags)");
  }
  return "";
}

void RefuseUnknownFlags(int argc, char** argv) {
  const std::string error = UnknownFlagError(argc, argv);
  if (error.empty()) return;
  std::fprintf(stderr, "ERROR: %s\n", error.c_str());
  std::exit(1);
}

absl::Status FlagsFromEnvironment(int argc, char** argv, const std::vector<FlagFromEnv>& pairs) {
  for (const FlagFromEnv& p : pairs) {
    const char* value = std::getenv(p.variable);
    if (value == nullptr || *value == '\0' || OnCommandLine(argc, argv, p.flag)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(p.flag);
    if (flag == nullptr) return absl::InternalError(absl::StrCat("no flag --", p.flag));
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.variable, "='", value, "' is no value for --", p.flag, ": ", error));
    }
  }
  return absl::OkStatus();
}

double RenamedFlag(const char* old_name, const std::optional<double>& old_value, const char* new_name, double value) {
  if (!old_value) return value;
  std::fprintf(stderr, "warning: --%s is deprecated and goes in the next release: use --%s\n", old_name, new_name);
  return *old_value;
}

}  // namespace omnilearn
