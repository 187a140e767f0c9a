// The job's training mode: one enum for the server, the worker and the tools.
#ifndef OMNILEARN_COMMON_TRAINING_MODE_H_
#define OMNILEARN_COMMON_TRAINING_MODE_H_

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

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_TRAINING_MODE_H_
