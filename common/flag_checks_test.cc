#include "common/flag_checks.h"

#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "catch2/catch.hpp"

ABSL_FLAG(double, epochs, 0, "for the test");
ABSL_FLAG(std::string, server, "127.0.0.1:50051", "for the test");
ABSL_FLAG(bool, evaluate, false, "for the test");

namespace omnilearn {
namespace {

TEST_CASE("range checks name the flag and its range", "[flags]") {
  REQUIRE(CheckFlagRanges({{"port", 50051, 1, 65535}, {"epochs", 0.5, 0, 1e6}}).ok());
  absl::Status s = CheckFlagRanges({{"port", 99999, 1, 65535}});
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(s.message() == "--port must be in [1, 65535], got 99999");
  REQUIRE(CheckFlagRanges({{"epochs", -1, 0, 1e6}}).message() == "--epochs must be in [0, 1e+06], got -1");
  REQUIRE_FALSE(CheckFlagRanges({{"lr", NAN, 0, 10}}).ok());
}

TEST_CASE("a mistyped flag is refused with the nearest known flag", "[flags]") {
  REQUIRE(NearestName("epoch", {"epochs", "server", "evaluate"}) == "epochs");
  REQUIRE(NearestName("sever", {"epochs", "server"}) == "server");
  REQUIRE(NearestName("learning_rate", {"lr", "epochs"}).empty());  // nothing close
  char prog[] = "prog", typo[] = "--epoch=2", good[] = "--server=h:1", neg[] = "--noevaluate", end[] = "--",
       after[] = "--whatever", help[] = "--helpfull";
  char* with_typo[] = {prog, good, typo};
  const std::string error = UnknownFlagError(3, with_typo);
  CAPTURE(error);
  REQUIRE(absl::StrContains(error, "Unknown command line flag 'epoch'. Did you mean '--epochs'?"));
  char* fine[] = {prog, good, neg, help, end, after};
  REQUIRE(UnknownFlagError(6, fine).empty());  // --noFLAG of a bool, absl's own; nothing after "--"
}

TEST_CASE("flags left out of the command line come from the environment", "[flags]") {
  setenv("OMNILEARN_TEST_SERVER", "ps:7", 1);
  setenv("OMNILEARN_TEST_EPOCHS", "3.5", 1);
  char prog[] = "prog", given[] = "--epochs=1";
  char* argv[] = {prog, given};
  absl::SetFlag(&FLAGS_epochs, 1);
  REQUIRE(
      FlagsFromEnvironment(2, argv, {{"server", "OMNILEARN_TEST_SERVER"}, {"epochs", "OMNILEARN_TEST_EPOCHS"}}).ok());
  REQUIRE(absl::GetFlag(FLAGS_server) == "ps:7");  // from the environment
  REQUIRE(absl::GetFlag(FLAGS_epochs) == 1);       // the command line wins
  setenv("OMNILEARN_TEST_EPOCHS", "many", 1);
  absl::Status bad = FlagsFromEnvironment(1, argv, {{"epochs", "OMNILEARN_TEST_EPOCHS"}});
  REQUIRE(absl::IsInvalidArgument(bad));
  REQUIRE(absl::StrContains(bad.message(), "OMNILEARN_TEST_EPOCHS='many' is no value for --epochs"));
}

TEST_CASE("a renamed flag's old name, when given, still sets it", "[flags]") {
  REQUIRE(RenamedFlag("lease", std::nullopt, "lease_s", 60) == 60);
  REQUIRE(RenamedFlag("lease", 20.0, "lease_s", 60) == 20);
}

}  // namespace
}  // namespace omnilearn
