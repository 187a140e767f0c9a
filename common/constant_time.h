// Comparison of secrets (bearer tokens, session secrets) in time that does not depend on
// where they differ. No gRPC, no torch.
#ifndef OMNILEARN_COMMON_CONSTANT_TIME_H_
#define OMNILEARN_COMMON_CONSTANT_TIME_H_

#include "absl/strings/string_view.h"

namespace omnilearn {

// Whether `given` equals `secret`. Walks all of `secret` whatever `given` holds, so the
// time tells nothing about how much of it matched.
inline bool ConstantTimeEquals(absl::string_view given, absl::string_view secret) {
  unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    diff |= static_cast<unsigned char>(secret[i] ^ (i < given.size() ? given[i] : 0));
  }
  return diff == 0;
}

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_CONSTANT_TIME_H_
