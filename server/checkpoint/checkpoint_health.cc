#include "server/checkpoint/checkpoint_health.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace omnilearn {
namespace server {

CheckpointHealthView Aged(CheckpointHealthView view, absl::Duration elapsed) {
  view.newest_age += elapsed;
  return view;
}

std::string DescribeCheckpoints(const CheckpointHealthView& view) {
  const std::string newest =
      view.newest_version == 0
          ? absl::StrFormat("none for %.0fs", absl::ToDoubleSeconds(view.newest_age))
          : absl::StrFormat("v%d %.0fs ago", view.newest_version, absl::ToDoubleSeconds(view.newest_age));
  std::string out =
      view.failing() ? absl::StrCat("FAILING (", view.failures, "): ", view.last_error, "; ", newest) : newest;
  if (view.in_memory) absl::StrAppend(&out, " (in memory)");
  if (view.corrupt_skipped > 0) absl::StrAppend(&out, "; ", view.corrupt_skipped, " corrupt skipped");
  return out;
}

CheckpointHealth::CheckpointHealth(const Clock* clock, bool in_memory)
    : clock_(clock), in_memory_(in_memory), newest_at_(clock->Now()) {}

void CheckpointHealth::Written(uint64_t version) { Resumed(version, clock_->Now()); }

void CheckpointHealth::Resumed(uint64_t version, absl::Time written_at) {
  absl::MutexLock lock(&mu_);
  newest_at_ = written_at;
  newest_version_ = version;
  last_error_.clear();
}

void CheckpointHealth::Failed(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  ++failures_;
  last_error_ = error.message().empty() ? absl::StatusCodeToString(error.code()) : std::string(error.message());
}

void CheckpointHealth::SkippedCorrupt() {
  absl::MutexLock lock(&mu_);
  ++corrupt_skipped_;
}

CheckpointHealthView CheckpointHealth::View() const {
  absl::MutexLock lock(&mu_);
  CheckpointHealthView v;
  v.in_memory = in_memory_;
  v.newest_version = newest_version_;
  v.newest_age = clock_->Now() - newest_at_;
  v.failures = failures_;
  v.last_error = last_error_;
  v.corrupt_skipped = corrupt_skipped_;
  return v;
}

void CheckpointHealth::ExportMetrics(metrics::Registry& registry) {
  auto& failures = registry
                       .AddCounter("omnilearn_checkpoint_failures_total",
                                   "checkpoints that could not be written (training goes on without them)")
                       .Add({});
  auto& skipped = registry
                      .AddCounter("omnilearn_checkpoint_corrupt_skipped_total",
                                  "unreadable checkpoint files passed over for older ones (checksum, truncation)")
                      .Add({});
  auto& failing =
      registry.AddGauge("omnilearn_checkpoint_failing", "1 while the newest checkpoint attempt failed").Add({});
  auto& age = registry
                  .AddGauge("omnilearn_checkpoint_age_seconds",
                            "seconds since the newest good checkpoint (since the start while there is none)")
                  .Add({});
  auto& version =
      registry.AddGauge("omnilearn_checkpoint_newest_version", "model version of the newest good checkpoint (0: none)")
          .Add({});
  registry.AddCollectHook([this, &failures, &skipped, &failing, &age, &version] {
    const CheckpointHealthView v = View();
    failures.Increment(static_cast<double>(v.failures) - failures.Value());
    skipped.Increment(static_cast<double>(v.corrupt_skipped) - skipped.Value());
    failing.Set(v.failing() ? 1 : 0);
    age.Set(absl::ToDoubleSeconds(v.newest_age));
    version.Set(static_cast<double>(v.newest_version));
  });
}

}  // namespace server
}  // namespace omnilearn
