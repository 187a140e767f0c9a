// One registration's commands from the coordinator, applied in the stream's order on a
// thread of their own (docs/SHARDING.md, "Steps"), so that the stream is read on while a
// step waits up to member_wait for a member's slice: a session opened meanwhile is let in
// at once (ShardApplier::OpenAhead), and applied again in its place.
#ifndef OMNILEARN_SERVER_RPC_ORDERED_APPLY_H_
#define OMNILEARN_SERVER_RPC_ORDERED_APPLY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "proto/omnilearn.pb.h"
#include "server/rpc/shard_apply.h"

namespace omnilearn {
namespace server {

// Thread-safe: one reader calls Add and Finish; the applying thread is its own.
class OrderedApply {
 public:
  // Applies through `applier` (not owned; used by this class's thread only until Finish
  // returns, but for OpenAhead). `on_error` runs once, on that thread, when a command
  // fails (the reader's call is cancelled then).
  OrderedApply(ShardApplier* applier, std::function<void()> on_error);
  ~OrderedApply();  // Finish()

  // Queues `command`; false once a command failed (nothing more is applied). Waits while
  // kMaxQueuedBytes are queued: the coordinator's stream is held back then, as before.
  bool Add(v1::ShardCommand command);
  // No more commands: returns once every queued command was applied, or with the first
  // failure.
  absl::Status Finish();

  static constexpr int64_t kMaxQueuedBytes = 64 << 20;

 private:
  void Loop();

  ShardApplier* const applier_;
  const std::function<void()> on_error_;
  absl::Mutex mu_;
  std::deque<v1::ShardCommand> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Commands queued or being applied that an opening may not pass (an init and its values:
  // ShardApplier::MayBePassed).
  int barriers_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_ORDERED_APPLY_H_
