// Human- and machine-readable views of a ServerSnapshot.
#ifndef OMNILEARN_SERVER_SUMMARY_H_
#define OMNILEARN_SERVER_SUMMARY_H_

#include <string>

#include "server/parameter_server_core.h"

namespace omnilearn {
namespace server {

// The --summary_json document: mode, wall time, model version, per worker its final
// batch, mean compute time, iterations and samples; the last test accuracy.
std::string SummaryJson(const ServerSnapshot& s, double wall_seconds);

// One line per controller adjustment: "adj 3 v=120 | w0 b=64 t=31.2ms | ...".
std::string AdjustmentLine(const ServerSnapshot& s);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_SUMMARY_H_
