// The job's training mode: one enum for the server, the worker and the tools.
#ifndef OMNILEARN_COMMON_TRAINING_MODE_H_
#define OMNILEARN_COMMON_TRAINING_MODE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace omnilearn {

// sync: one step per round over all live workers. async: each push applied on arrival.
// ssp: applied on arrival like async, but a worker may be at most `staleness_bound`
// iterations ahead of the slowest live one (its push reply waits until it is not).
enum class Mode { kSync, kAsync, kSsp };

// "sync", "async" or "ssp", as the server's --mode names them.
const char* ModeName(Mode mode);
// The inverse of ModeName, case-insensitive.
absl::StatusOr<Mode> ParseMode(absl::string_view name);

// Local steps (the server's --local_steps, --local_batch): the steps a worker takes on a
// round of `batch` samples. `local_batch` > 0: steps of about that many samples; else
// `local_steps` of them; never more steps than samples, and 1 without local steps. The
// C++ worker splits its batch so, the server counts a round's steps so, and the Python
// worker's split (python/omnilearn/session.py, _round_parts) is the same rule.
int64_t LocalRoundSteps(int64_t batch, int local_steps, int64_t local_batch);

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_TRAINING_MODE_H_
