#include "server/checkpoint/checkpoint_health.h"

#include <string>

#include "catch2/catch.hpp"
#include "common/clock.h"
#include "common/metrics.h"

namespace omnilearn {
namespace server {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST_CASE("checkpoint health: failures, the newest good checkpoint's age and skipped files, on the clock",
          "[checkpoint_health]") {
  FakeClock clock;
  CheckpointHealth health(&clock, /*in_memory=*/false);
  metrics::Registry registry;
  health.ExportMetrics(registry);
  clock.Advance(absl::Seconds(30));
  CheckpointHealthView v = health.View();
  REQUIRE(v.newest_version == 0);
  REQUIRE(v.newest_age == absl::Seconds(30));  // since the start while there is none
  REQUIRE_FALSE(v.failing());
  REQUIRE(DescribeCheckpoints(v) == "none for 30s");

  health.Written(12);
  clock.Advance(absl::Seconds(4));
  v = health.View();
  REQUIRE(v.newest_version == 12);
  REQUIRE(v.newest_age == absl::Seconds(4));
  REQUIRE(DescribeCheckpoints(v) == "v12 4s ago");

  health.Failed(absl::ResourceExhaustedError("write /ckpt/x: No space left on device"));
  health.Failed(absl::ResourceExhaustedError("write /ckpt/y: No space left on device"));
  health.SkippedCorrupt();
  clock.Advance(absl::Seconds(54));
  v = health.View();
  REQUIRE(v.failing());
  REQUIRE(v.failures == 2);
  REQUIRE(v.newest_version == 12);  // the failures keep the newest good one
  REQUIRE(DescribeCheckpoints(v) ==
          "FAILING (2): write /ckpt/y: No space left on device; v12 58s ago; 1 corrupt skipped");
  std::string text = registry.Serialize();
  REQUIRE(Has(text, "omnilearn_checkpoint_failures_total 2"));
  REQUIRE(Has(text, "omnilearn_checkpoint_corrupt_skipped_total 1"));
  REQUIRE(Has(text, "omnilearn_checkpoint_failing 1"));
  REQUIRE(Has(text, "omnilearn_checkpoint_age_seconds 58"));
  REQUIRE(Has(text, "omnilearn_checkpoint_newest_version 12"));

  // A checkpoint written again: no longer failing; the counts stay (counters).
  health.Written(20);
  text = registry.Serialize();
  REQUIRE(Has(text, "omnilearn_checkpoint_failing 0"));
  REQUIRE(Has(text, "omnilearn_checkpoint_age_seconds 0"));
  REQUIRE(Has(text, "omnilearn_checkpoint_failures_total 2"));
  REQUIRE(Has(text, "omnilearn_checkpoint_newest_version 20"));
  REQUIRE_FALSE(health.View().failing());
}

TEST_CASE("a reported view ages on the reader's clock; memory checkpoints say so", "[checkpoint_health]") {
  FakeClock clock;
  CheckpointHealth health(&clock, /*in_memory=*/true);
  health.Written(3);
  clock.Advance(absl::Seconds(2));
  const CheckpointHealthView later = Aged(health.View(), absl::Seconds(10));
  REQUIRE(later.newest_age == absl::Seconds(12));
  REQUIRE(DescribeCheckpoints(later) == "v3 12s ago (in memory)");
  health.Resumed(2, clock.Now() - absl::Minutes(5));  // a restart's checkpoint, written 5 minutes ago
  REQUIRE(DescribeCheckpoints(health.View()) == "v2 300s ago (in memory)");
  health.Failed(absl::InternalError(""));
  REQUIRE(health.View().last_error == "INTERNAL");  // a failure without a message still fails
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
