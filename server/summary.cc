#include "server/summary.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

}  // namespace

std::string SummaryJson(const ServerSnapshot& s, double wall_seconds) {
  std::string out = absl::StrFormat(
      "{\n  \"mode\": \"%s\",\n  \"controller\": \"%s\",\n  \"wall_seconds\": %.3f,\n  \"model_version\": %d,\n"
      "  \"rounds\": %d,\n  \"global_batch\": %d,\n  \"global_samples\": %d,\n  \"adjustments\": %d,\n"
      "  \"last_train_loss\": %.6f,\n  \"test_accuracy\": %s,\n  \"test_accuracy_version\": %d,\n"
      "  \"workers\": [",
      ModeName(s.mode), s.controller, wall_seconds, s.version, s.rounds, s.global_batch, s.global_samples,
      s.adjustments, s.last_train_loss, s.test_accuracy ? absl::StrFormat("%.6f", *s.test_accuracy) : "null", s.test_accuracy_version);
  for (size_t i = 0; i < s.workers.size(); ++i) {
    const WorkerSnapshot& w = s.workers[i];
    absl::StrAppend(
        &out, i ? "," : "", "\n    ",
        absl::StrFormat("{\"id\": %d, \"name\": %s, \"host\": %s, \"state\": \"%s\", \"final_batch\": %d, "
                        "\"max_batch\": %d, \"mean_compute_seconds\": %.6f, \"iterations\": %d, \"samples\": %d, \"expired\": %s}",
                        w.id, JsonString(w.name), JsonString(w.host), WorkerStateName(w.state), w.batch,
                        w.max_batch, w.mean_compute_seconds, w.iterations, w.samples, w.expired ? "true" : "false"));
  }
  absl::StrAppend(&out, "\n  ]\n}\n");
  return out;
}

std::string AdjustmentLine(const ServerSnapshot& s) {
  std::string out = absl::StrFormat("adj %3d v=%-6d", s.adjustments, s.version);
  for (const WorkerSnapshot& w : s.workers) {
    if (w.state == WorkerState::kLeft) continue;
    absl::StrAppend(&out, absl::StrFormat(" | %s b=%d t=%.1fms%s", w.name, w.batch, 1000 * w.last_compute_seconds,
                                          w.state == WorkerState::kDropped ? " (dropped)" : ""));
  }
  absl::StrAppend(&out, absl::StrFormat(" | loss %.3f", s.last_train_loss));
  if (s.test_accuracy) absl::StrAppend(&out, absl::StrFormat(" acc %.2f%%", 100 * *s.test_accuracy));
  return out;
}

}  // namespace server
}  // namespace omnilearn
