#include "worker/client/timeline.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace omnilearn {
namespace worker {

Timeline::Timeline(const Clock* clock, std::function<void(const std::string&)> write)
    : clock_(clock), write_(std::move(write)) {}

Timeline::~Timeline() { Flush(); }

Timeline& Timeline::Process() {
  static Timeline* const timeline = [] {
    std::function<void(const std::string&)> write;
    const char* path = std::getenv("OMNILEARN_TIMELINE");
    if (path != nullptr && *path != '\0') {
      if (std::FILE* f = std::fopen(path, "a"); f != nullptr) {
        // Line-buffered appends: the lines of an iteration stay whole beside other writers.
        std::setvbuf(f, nullptr, _IOLBF, 1 << 16);
        write = [f](const std::string& line) { std::fputs(line.c_str(), f); };
      } else {
        std::fprintf(stderr, "OMNILEARN_TIMELINE: cannot open %s: %s (no timeline recorded)\n", path,
                     std::strerror(errno));
      }
    }
    return new Timeline(Clock::Real(), std::move(write));  // never destroyed: flushed per line
  }();
  return *timeline;
}

void Timeline::Begin(uint64_t iteration, absl::Duration computed) {
  if (!enabled()) return;
  absl::MutexLock lock(&mu_);
  FlushLocked();
  open_ = true;
  iteration_ = iteration;
  start_ = clock_->Now() - std::max(computed, absl::ZeroDuration());
  events_.push_back({"begin", 0.0, -1});
}

void Timeline::Mark(absl::string_view event, int slice) {
  if (!enabled()) return;
  absl::MutexLock lock(&mu_);
  if (!open_) return;
  events_.push_back({std::string(event), absl::ToDoubleMilliseconds(clock_->Now() - start_), slice});
}

void Timeline::Add(absl::string_view name, absl::Duration d) {
  if (!enabled()) return;
  absl::MutexLock lock(&mu_);
  if (open_) totals_[std::string(name)] += absl::ToDoubleMilliseconds(d);
}

void Timeline::Flush() {
  if (!enabled()) return;
  absl::MutexLock lock(&mu_);
  FlushLocked();
}

void Timeline::FlushLocked() {
  if (!open_) return;
  std::string line = absl::StrFormat("{\"pid\":%d,\"iteration\":%d,\"start_ms\":%.3f,\"events\":[",
                                     static_cast<int>(getpid()), iteration_, absl::ToUnixMicros(start_) / 1000.0);
  for (size_t i = 0; i < events_.size(); ++i) {
    absl::StrAppend(&line, i ? "," : "",
                    absl::StrFormat("[\"%s\",%.3f,%d]", events_[i].name, events_[i].ms, events_[i].slice));
  }
  absl::StrAppend(&line, "],\"totals\":{");
  bool first = true;
  for (const auto& [name, ms] : totals_) {
    absl::StrAppend(&line, first ? "" : ",", absl::StrFormat("\"%s\":%.3f", name, ms));
    first = false;
  }
  absl::StrAppend(&line, "}}\n");
  write_(line);
  open_ = false;
  events_.clear();
  totals_.clear();
}

}  // namespace worker
}  // namespace omnilearn
