#include "common/large_buffers.h"

#include <malloc.h>

namespace omnilearn {

void KeepLargeBuffersInHeap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: chunks (4 MiB) come from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // and their pages stay mapped for the next ones
}

}  // namespace omnilearn
