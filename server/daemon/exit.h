// The daemon's exit statuses: 2 for flags that cannot work, 1 for what failed at run time.
#ifndef OMNILEARN_SERVER_DAEMON_EXIT_H_
#define OMNILEARN_SERVER_DAEMON_EXIT_H_

#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace omnilearn {
namespace server {

// Says why the server cannot go on; returns the exit status `code`.
inline int Fail(const absl::Status& s, int code) {
  std::fprintf(stderr, "omnilearn_server: %s\n", std::string(s.message()).c_str());
  return code;
}

// Exits 1 when the server could not listen, 2 for flags that cannot work.
inline int FailToListen(const absl::Status& s) { return Fail(s, absl::IsUnavailable(s) ? 1 : 2); }

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_EXIT_H_
