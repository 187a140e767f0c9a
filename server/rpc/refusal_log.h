// Which refused calls to log: once per cause and peer in a window, so that a worker
// retrying a refused join (a wrong token, another model) is seen in the server's log
// without flooding it. Thread-safe.
#ifndef OMNILEARN_SERVER_RPC_REFUSAL_LOG_H_
#define OMNILEARN_SERVER_RPC_REFUSAL_LOG_H_

#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace omnilearn {
namespace server {

class RefusalLog {
 public:
  explicit RefusalLog(absl::Duration window = absl::Minutes(1), size_t max_entries = 1024)
      : window_(window), max_entries_(max_entries) {}
  // True when (peer, cause) was not logged within the window before `now` (and notes it).
  bool ShouldLog(const std::string& peer, const std::string& cause, absl::Time now);
  // The line for `what` ("a join") refused with `code` and `message` to the gRPC peer
  // `peer`, when ShouldLog holds for its host and cause (the code and the message's first
  // 200 characters); nullopt otherwise.
  std::optional<std::string> Line(absl::string_view what, const std::string& peer, absl::StatusCode code,
                                  const std::string& message, absl::Time now);

 private:
  const absl::Duration window_;
  const size_t max_entries_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, absl::Time> last_ ABSL_GUARDED_BY(mu_);
};

// The host part of a gRPC peer ("ipv4:10.0.0.5:41234" -> "10.0.0.5", "ipv6:[::1]:5" -> "[::1]").
std::string PeerHost(const std::string& peer);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_REFUSAL_LOG_H_
