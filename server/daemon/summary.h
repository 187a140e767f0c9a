// Human- and machine-readable views of a ServerSnapshot.
#ifndef OMNILEARN_SERVER_DAEMON_SUMMARY_H_
#define OMNILEARN_SERVER_DAEMON_SUMMARY_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/control/parameter_server_core.h"

namespace omnilearn {
namespace server {

// The --summary_json document: mode, wall time, model version, per worker its final
// batch, mean compute time, iterations and samples; the last test accuracy; the pushes
// counted by result; this process's peak resident memory.
std::string SummaryJson(const ServerSnapshot& s, double wall_seconds);

// This process's peak resident set (VmHWM) in bytes, 0 when unknown.
int64_t PeakRssBytes();

// One line per changed batch plan: "plan 3 (adj 12) v=120 spread 1.04 | w0 b=64 t=31.2ms | ...";
// the spread is the plan's predicted max/min iteration time.
std::string AdjustmentLine(const ServerSnapshot& s);

// The periodic progress line: "progress: epoch 1.23 | 1234 samples/s | v=456 | loss 0.412 |
// acc 86.10% (v=400) | 4 live workers". The rate is of the samples trained since the last
// line, when `samples_before` had been; after the job went back to a checkpoint (fewer
// samples now than before) it says so instead of a rate.
std::string ProgressLine(const ServerSnapshot& s, uint64_t samples_before, absl::Duration elapsed);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_SUMMARY_H_
