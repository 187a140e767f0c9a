#include "server/daemon/summary.h"

#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace omnilearn {
namespace server {
namespace {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// The job's accuracy as the summary names it: a test accuracy, or a Keras program's validation
// accuracy (PushHeader.accuracy_is_validation).
const char* AccuracyName(const ServerSnapshot& s) { return s.accuracy_is_validation ? "val_acc" : "acc"; }

std::string AccuracyJson(const ServerSnapshot& s, bool validation) {
  if (!s.test_accuracy || s.accuracy_is_validation != validation) return "null";
  return absl::StrFormat("%.6f", *s.test_accuracy);
}

}  // namespace

std::string SummaryJson(const ServerSnapshot& s, double wall_seconds) {
  std::string out = absl::StrFormat(
      "{\n  \"mode\": \"%s\",\n  \"controller\": \"%s\",\n  \"wall_seconds\": %.3f,\n  \"model_version\": %d,\n"
      "  \"rounds\": %d,\n  \"global_batch\": %d,\n  \"global_samples\": %d,\n  \"dataset_size\": %d,\n"
      "  \"job_samples\": %d,\n  \"adjustments\": %d,\n"
      "  \"last_train_loss\": %.6f,\n  \"test_accuracy\": %s,\n  \"validation_accuracy\": %s,\n"
      "  \"test_accuracy_version\": %d,\n  \"workers\": [",
      ModeName(s.mode), s.controller, wall_seconds, s.version, s.rounds, s.global_batch, s.global_samples,
      s.dataset_size, s.job_samples, s.adjustments, s.last_train_loss, AccuracyJson(s, false), AccuracyJson(s, true),
      s.test_accuracy_version);
  for (size_t i = 0; i < s.workers.size(); ++i) {
    const WorkerSnapshot& w = s.workers[i];
    absl::StrAppend(
        &out, i ? "," : "", "\n    ",
        absl::StrFormat(
            "{\"id\": %d, \"name\": %s, \"host\": %s, \"state\": \"%s\", \"final_batch\": %d, "
            "\"max_batch\": %d, \"mean_compute_seconds\": %.6f, \"iterations\": %d, \"samples\": %d, \"expired\": %s}",
            w.id, JsonString(w.name), JsonString(w.host), WorkerStateName(w.state), w.batch, w.max_batch,
            w.mean_compute_seconds, w.iterations, w.samples, w.expired ? "true" : "false"));
  }
  absl::StrAppend(&out, "\n  ],\n  \"pushes_by_result\": {");
  bool first = true;
  for (const auto& [result, n] : s.pushes_by_result) {
    absl::StrAppend(&out, first ? "" : ", ", JsonString(result), ": ", n);
    first = false;
  }
  absl::StrAppend(&out, "},\n  \"peak_rss_bytes\": ", PeakRssBytes(), "\n}\n");
  return out;
}

int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    int64_t kb = 0;
    if (absl::StartsWith(line, "VmHWM:") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(6), "kB")), &kb)) {
      return kb * 1024;
    }
  }
  return 0;
}

std::string AdjustmentLine(const ServerSnapshot& s) {
  std::string out = absl::StrFormat("plan %d (adj %d) v=%-6d spread %.2f%s", s.plan_changes, s.adjustments, s.version,
                                    s.predicted_spread, s.plan_reverted ? " reverted (the plan before: noise)" : "");
  for (const WorkerSnapshot& w : s.workers) {
    if (w.state == WorkerState::kLeft) continue;
    // The new plan's batch with the time the controller predicts for it; the last measured
    // time was at the batch before.
    const std::string predicted =
        w.predicted_seconds > 0 ? absl::StrFormat(" ~%.1fms", 1000 * w.predicted_seconds) : std::string();
    absl::StrAppend(
        &out, absl::StrFormat(
                  " | %s b=%d%s (was %.1fms)%s%s", w.name, w.batch, predicted, 1000 * w.last_compute_seconds,
                  w.emulation_overruns > 0 ? absl::StrFormat(" overruns=%d", w.emulation_overruns) : std::string(),
                  w.state == WorkerState::kDropped ? " (dropped)" : ""));
  }
  absl::StrAppend(&out, absl::StrFormat(" | loss %.3f", s.last_train_loss));
  if (s.test_accuracy) {
    absl::StrAppend(&out, absl::StrFormat(" %s %.2f%%", AccuracyName(s), 100 * *s.test_accuracy));
  }
  return out;
}

std::string ProgressLine(const ServerSnapshot& s, uint64_t samples_before, absl::Duration elapsed) {
  std::string out = "progress:";
  if (s.dataset_size > 0) {
    absl::StrAppend(&out, absl::StrFormat(" epoch %.2f |", static_cast<double>(s.global_samples) / s.dataset_size));
  } else {
    absl::StrAppend(&out, absl::StrFormat(" %d samples |", s.global_samples));
  }
  const double seconds = absl::ToDoubleSeconds(elapsed);
  if (s.global_samples < samples_before) {  // an unsigned difference would be 1.8e19
    absl::StrAppend(&out, absl::StrFormat(" went back %d samples to a checkpoint", samples_before - s.global_samples));
  } else {
    const double samples = static_cast<double>(s.global_samples - samples_before);
    absl::StrAppend(&out, absl::StrFormat(" %.0f samples/s", seconds > 0 ? samples / seconds : 0.0));
  }
  absl::StrAppend(&out, absl::StrFormat(" | v=%d | loss %.3f", s.version, s.last_train_loss));
  if (s.test_accuracy) {
    absl::StrAppend(
        &out, absl::StrFormat(" | %s %.2f%% (v=%d)", AccuracyName(s), 100 * *s.test_accuracy, s.test_accuracy_version));
  }
  int live = 0;
  uint64_t overruns = 0;
  for (const WorkerSnapshot& w : s.workers) {
    live += w.state == WorkerState::kActive || w.state == WorkerState::kPending;
    overruns += w.emulation_overruns;
  }
  absl::StrAppend(&out, absl::StrFormat(" | %d live workers", live));
  // Emulated devices whose real compute outlasted their time: the times the controller got
  // then were not the devices' (a loaded host), and so may be its plan.
  if (overruns > 0) absl::StrAppend(&out, absl::StrFormat(" | %d emulation overruns", overruns));
  return out;
}

}  // namespace server
}  // namespace omnilearn
