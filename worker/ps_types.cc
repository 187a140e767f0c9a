#include "worker/ps_types.h"

namespace omnilearn {
namespace worker {

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kSync:
      return "sync";
    case Mode::kAsync:
      return "async";
    case Mode::kSsp:
      return "ssp";
    case Mode::kUnknown:
      break;
  }
  return "unknown";
}

int64_t SampleCount(const Assignment& a) {
  int64_t n = 0;
  for (const SampleSpan& span : a) n += static_cast<int64_t>(span.ids.size());
  return n;
}

}  // namespace worker
}  // namespace omnilearn
