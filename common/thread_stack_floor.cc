// Raises small thread-stack requests to a floor, for processes that load LibTorch.
//
// Debian's civetweb creates its threads with a fixed 100 KiB stack. glibc carves the
// static TLS of every loaded library out of each thread's stack, and LibTorch's
// dependencies alone hold about 108 KiB of it (OpenBLAS 60 KiB, glog 30 KiB), so in
// the worker pthread_create fails with EINVAL and /metrics cannot start. Defined in
// the executable, this pthread_attr_setstacksize interposes the C library's for every
// shared library; requests of at least the floor pass through unchanged.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>

namespace {
constexpr size_t kStackFloor = 512 * 1024;
using SetStackSize = int (*)(pthread_attr_t*, size_t);
}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  static const SetStackSize real = reinterpret_cast<SetStackSize>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real(attr, size < kStackFloor ? kStackFloor : size);
}
