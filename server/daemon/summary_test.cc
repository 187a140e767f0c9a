#include "server/daemon/summary.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("the progress line's rate is of the samples since the last line", "[summary]") {
  ServerSnapshot s;
  s.dataset_size = 1000;
  s.global_samples = 1500;
  s.version = 40;
  const std::string line = ProgressLine(s, 500, absl::Seconds(10));
  INFO(line);
  REQUIRE(absl::StrContains(line, "epoch 1.50 |"));
  REQUIRE(absl::StrContains(line, " 100 samples/s |"));
}

TEST_CASE("after the job went back to a checkpoint the line says so, not a rate of 1.8e19", "[summary]") {
  ServerSnapshot s;
  s.global_samples = 1200;
  const std::string line = ProgressLine(s, 1500, absl::Seconds(10));
  INFO(line);
  REQUIRE(absl::StrContains(line, "went back 300 samples to a checkpoint"));
  REQUIRE_FALSE(absl::StrContains(line, "samples/s"));
}

TEST_CASE("a validation accuracy is named apart from a test accuracy, in the summary and the lines", "[summary]") {
  ServerSnapshot s;
  s.dataset_size = 1000;
  s.test_accuracy = 0.875;
  s.test_accuracy_version = 12;
  std::string json = SummaryJson(s, 1.0);
  INFO(json);
  REQUIRE(absl::StrContains(json, "\"test_accuracy\": 0.875000,"));
  REQUIRE(absl::StrContains(json, "\"validation_accuracy\": null,"));
  REQUIRE(absl::StrContains(ProgressLine(s, 0, absl::Seconds(1)), "| acc 87.50% (v=12)"));
  s.accuracy_is_validation = true;  // a Keras program's validation_split or validation_data
  json = SummaryJson(s, 1.0);
  INFO(json);
  REQUIRE(absl::StrContains(json, "\"test_accuracy\": null,"));
  REQUIRE(absl::StrContains(json, "\"validation_accuracy\": 0.875000,"));
  REQUIRE(absl::StrContains(ProgressLine(s, 0, absl::Seconds(1)), "| val_acc 87.50% (v=12)"));
}

TEST_CASE("the plan line shows each new batch with its predicted time, the last measured one, and overruns",
          "[summary]") {
  ServerSnapshot s;
  s.plan_changes = 4;
  s.adjustments = 9;
  s.version = 120;
  WorkerSnapshot w;
  w.name = "w0";
  w.batch = 26;
  w.predicted_seconds = 0.0085;
  w.last_compute_seconds = 0.0087;
  w.emulation_overruns = 3;
  s.workers.push_back(w);
  w.name = "w1";
  w.batch = 6;
  w.predicted_seconds = 0;  // not measured yet
  w.emulation_overruns = 0;
  s.workers.push_back(w);
  const std::string line = AdjustmentLine(s);
  INFO(line);
  REQUIRE(line.find("| w0 b=26 ~8.5ms (was 8.7ms) overruns=3 |") != std::string::npos);
  REQUIRE(line.find("| w1 b=6 (was 8.7ms) |") != std::string::npos);
  REQUIRE(ProgressLine(s, 0, absl::Seconds(1)).find("| 3 emulation overruns") != std::string::npos);
  REQUIRE(line.find("reverted") == std::string::npos);
  s.plan_reverted = true;  // the controller took a plan back: the line says so
  REQUIRE(AdjustmentLine(s).find("spread 1.00 reverted (the plan before: noise) |") != std::string::npos);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
