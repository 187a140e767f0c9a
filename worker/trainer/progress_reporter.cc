#include "worker/trainer/progress_reporter.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace omnilearn {
namespace worker {

ProgressReporter::ProgressReporter(std::string name, int log_every, Sink sink)
    : name_(std::move(name)), log_every_(log_every), sink_(std::move(sink)) {}

void ProgressReporter::Note(const std::string& text) const {
  const std::string line = absl::StrCat("[", name_, "] ", text);
  if (sink_) {
    sink_(line);
    return;
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void ProgressReporter::Iteration(int64_t it, int64_t batch, double loss, double compute_seconds,
                                 uint64_t version) const {
  if (log_every_ <= 0 || it % log_every_ != 0) return;
  Note(absl::StrFormat("it=%d batch=%d loss=%.4f compute=%.1fms version=%d", it, batch, loss, 1000 * compute_seconds,
                       version));
}

void ProgressReporter::Evaluation(double epoch, double every_epochs, double accuracy, uint64_t version) const {
  const bool whole = std::fabs(epoch - std::round(epoch)) < 1e-9 || every_epochs >= 1;
  Note(absl::StrFormat("epoch %.*f: test accuracy %.2f%% (model version %d)", whole ? 0 : 2,
                       whole ? std::floor(epoch) : epoch, 100 * accuracy, version));
}

}  // namespace worker
}  // namespace omnilearn
