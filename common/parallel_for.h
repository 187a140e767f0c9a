// Model-sized loops split across cores: the optimizer step and the sync round's
// accumulation each walk every parameter, and on a server most cores are idle while
// they run under the core's mutex.
#ifndef OMNILEARN_COMMON_PARALLEL_FOR_H_
#define OMNILEARN_COMMON_PARALLEL_FOR_H_

#include <cstdint>
#include <functional>

namespace omnilearn {

// Calls fn(begin, end) on disjoint ranges covering [0, n), each of at least `grain`
// elements (so small loops run inline, on the caller's thread), on up to one range per
// core: the caller runs one, a process-wide pool the others. Returns when all have run.
// Thread-safe; fn must be safe to call concurrently on disjoint ranges.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

// The ranges ParallelFor cuts [0, n) into (at least 1).
int ParallelParts(int64_t n, int64_t grain);

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_PARALLEL_FOR_H_
