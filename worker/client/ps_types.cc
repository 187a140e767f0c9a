#include "worker/client/ps_types.h"

namespace omnilearn {
namespace worker {

const char* ModeName(std::optional<Mode> mode) { return mode ? ::omnilearn::ModeName(*mode) : "unknown"; }

}  // namespace worker
}  // namespace omnilearn
