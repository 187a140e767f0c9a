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

}  // namespace worker
}  // namespace omnilearn
