// Keeps the model-sized and chunk-sized buffers of a parameter server or worker in the
// heap. glibc serves allocations above its mmap threshold with fresh mappings and trims
// the heap top above its trim threshold: every 4 MiB chunk message (gRPC slices,
// protobuf strings) then costs page faults and zeroing of new pages. bench/transfer
// measured pull 0.19 -> 0.26 and push 0.25 -> 0.35 of a TCP stream with this on.
#ifndef OMNILEARN_COMMON_LARGE_BUFFERS_H_
#define OMNILEARN_COMMON_LARGE_BUFFERS_H_

namespace omnilearn {

// Call once at the start of main, before threads exist.
void KeepLargeBuffersInHeap();

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_LARGE_BUFFERS_H_
