#include "server/control/push_check.h"

#include <cmath>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

PushInfo Good() {
  PushInfo p;
  p.id = 1;
  p.batch = 8;
  p.compute_seconds = 0.1;
  p.version = 3;
  p.train_loss = 0.5;
  return p;
}

bool Refused(const absl::Status& s, const char* says) {
  return absl::IsInvalidArgument(s) && absl::StrContains(s.message(), says);
}

TEST_CASE("a push's report: accuracy in [0, 1], a finite loss", "[push_check]") {
  PushInfo p = Good();
  REQUIRE(CheckPushReport(p).ok());
  p.test_accuracy = 1.0;
  REQUIRE(CheckPushReport(p).ok());
  p.test_accuracy = 1.5;
  REQUIRE(Refused(CheckPushReport(p), "test accuracy must be in [0, 1]"));
  p.test_accuracy = NAN;
  REQUIRE(Refused(CheckPushReport(p), "test accuracy"));
  p = Good();
  p.train_loss = INFINITY;
  REQUIRE(Refused(CheckPushReport(p), "train loss must be finite"));
}

TEST_CASE("a push's gradient: batch, version, times, size and values", "[push_check]") {
  const std::vector<float> g(6, 1.0f);
  REQUIRE(CheckPushGradient(Good(), g, 3, 6).ok());
  PushInfo p = Good();
  p.batch = 0;
  REQUIRE(Refused(CheckPushGradient(p, g, 3, 6), "batch size 0 out of range"));
  p.batch = kMaxPushBatch + 1;
  REQUIRE(Refused(CheckPushGradient(p, g, 3, 6), "out of range"));
  p = Good();
  p.version = 4;
  REQUIRE(Refused(CheckPushGradient(p, g, 3, 6), "model version 4 is newer than the server's 3"));
  p = Good();
  p.compute_seconds = 0;
  REQUIRE(Refused(CheckPushGradient(p, g, 3, 6), "compute seconds must be in (0, 86400]"));
  p.compute_seconds = NAN;
  REQUIRE(Refused(CheckPushGradient(p, g, 3, 6), "compute seconds"));
  p = Good();
  p.communication_seconds = -1;
  REQUIRE(Refused(CheckPushGradient(p, g, 3, 6), "communication seconds must be in [0, 86400]"));
  REQUIRE(Refused(CheckPushGradient(Good(), std::vector<float>(5), 3, 6), "gradient has 5 values, the model has 6"));
  std::vector<float> nan = g;
  nan[2] = NAN;
  REQUIRE(Refused(CheckPushGradient(Good(), nan, 3, 6), "NaN or Inf"));
  p = Good();
  p.finite_checked = true;  // the service checked while copying: not walked again
  REQUIRE(CheckPushGradient(p, nan, 3, 6).ok());
  // Out of memory: no gradient and no times to check, the batch and version still are.
  p = Good();
  p.out_of_memory = true;
  p.compute_seconds = 0;
  REQUIRE(CheckPushGradient(p, {}, 3, 6).ok());
  p.version = 9;
  REQUIRE(Refused(CheckPushGradient(p, {}, 3, 6), "newer"));
}

TEST_CASE("a call acts for a session only with its secret, one message on every data plane", "[push_check]") {
  REQUIRE(CheckSessionSecret(7, "s3cret", "s3cret").ok());
  const absl::Status wrong = CheckSessionSecret(7, "s3cret", "s3crex");
  REQUIRE(absl::IsPermissionDenied(wrong));
  REQUIRE(wrong.message() ==
          "the call does not carry worker 7's session secret: only the process that joined as 7 can act for it");
  REQUIRE(absl::IsPermissionDenied(CheckSessionSecret(7, "s3cret", "")));
  REQUIRE(absl::IsPermissionDenied(CheckSessionSecret(7, "s3cret", "s3cret-and-more")));
}

TEST_CASE("a push must claim the batch it was assigned", "[push_check]") {
  REQUIRE(CheckAssignedBatch(32, /*uses_samples=*/true, /*assigned=*/32, /*planned=*/40).ok());
  const absl::Status more = CheckAssignedBatch(40, true, 32, 40);  // samples: the plan's batch does not count
  REQUIRE(more.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(more.message(), "claims a batch of 40 samples; the server assigned 32"));
  REQUIRE(CheckAssignedBatch(32, /*uses_samples=*/false, 32, 40).ok());  // what it was told...
  REQUIRE(CheckAssignedBatch(40, false, 32, 40).ok());                   // ...or the plan's now
  REQUIRE_FALSE(CheckAssignedBatch(64, false, 32, 40).ok());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
