// A worker's session id, as the server hands it out at join (JoinResponse.worker_id) and
// every later call carries it: one type for the controller, the core and its parts.
#ifndef OMNILEARN_COMMON_WORKER_ID_H_
#define OMNILEARN_COMMON_WORKER_ID_H_

#include <cstdint>

namespace omnilearn {

using WorkerId = uint64_t;

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_WORKER_ID_H_
