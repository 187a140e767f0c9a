// A slice's replica between the servers of a sharded job (ServerPeers.KeepReplica and
// FetchReplica, docs/SHARDING.md): its checkpoint file in pieces, each call with the job's
// peer secret. The server's side is PeerService's; these are the caller's.
#ifndef OMNILEARN_SERVER_RPC_REPLICA_CALLS_H_
#define OMNILEARN_SERVER_RPC_REPLICA_CALLS_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "proto/omnilearn.pb.h"
#include "server/checkpoint/checkpoint.h"

namespace omnilearn {
namespace server {

// The size of a replica's pieces on the wire.
inline constexpr size_t kReplicaPieceBytes = size_t{1} << 20;

// A replica's file as pieces: the first names the slice, version, map and size. Stops at
// the first `write` that fails (false).
bool WriteReplicaPieces(int index, uint64_t version, uint64_t fingerprint, const std::string& bytes,
                        const std::function<bool(const v1::ReplicaPiece&)>& write);

// A replica's pieces put together, each checked as it comes. Not thread-safe.
class ReplicaPieces {
 public:
  // InvalidArgument for a first piece past the bounds (kMaxSliceIndex, kMaxReplicaBytes) or
  // pieces that add up to more than it named.
  absl::Status Add(v1::ReplicaPiece& piece);
  bool complete() const { return started_ && bytes_.size() == first_.total_bytes(); }
  const v1::ReplicaPiece& first() const { return first_; }  // its header
  std::string Take() { return std::move(bytes_); }

 private:
  bool started_ = false;
  v1::ReplicaPiece first_;
  std::string bytes_;
};

// How one server reaches another's peer calls.
struct PeerCalls {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string peer_token;                     // the job's peer secret ("": servers on loopback alone)
  absl::Duration timeout = absl::Minutes(2);  // one call's bound
};

// A channel to another server's peer calls.
std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address, const PeerCalls& calls);
// Sends `bytes`, slice `index`'s checkpoint file of `version`, to `channel`'s server to keep.
absl::Status SendReplica(grpc::Channel* channel, const PeerCalls& calls, int index, uint64_t version,
                         uint64_t fingerprint, const std::string& bytes);
// The replica of slice `index` at `version` that `channel`'s server keeps, read back.
absl::StatusOr<CheckpointState> FetchReplica(grpc::Channel* channel, const PeerCalls& calls, int index,
                                             uint64_t version, uint64_t fingerprint);

// Sends each checkpoint given to it as its slice's replica, on a thread of its own: one at a
// time, and of those given meanwhile only the newest waits (an older replica is worth less
// than the newer one it would delay). A send that fails is logged; the next checkpoint's goes
// on. Thread-safe.
class ReplicaSender {
 public:
  // `send`: one replica's call (tests give their own); `log` may be null.
  using Send = std::function<absl::Status(const std::string& to, int index, uint64_t version, uint64_t fingerprint,
                                          const std::string& bytes)>;
  ReplicaSender(Send send, std::function<void(const std::string&)> log);
  // Over the network, one channel per server reached.
  explicit ReplicaSender(PeerCalls calls, std::function<void(const std::string&)> log);
  ~ReplicaSender();  // the one in flight ends first; the one waiting is dropped

  // Queues `state` (its `slice` set) for `to`, in place of one still waiting.
  void Keep(const std::string& to, const CheckpointState& state, uint64_t fingerprint) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until nothing is queued or in flight (tests).
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Replicas sent, and their bytes.
  uint64_t sent() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t bytes_sent() const ABSL_LOCKS_EXCLUDED(mu_);
  // The same in `registry` (before the first Keep; it outlives this): replicas sent and their
  // bytes, and the replicas that did not reach their server.
  void ExportMetrics(metrics::Registry& registry) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending {
    std::string to;
    CheckpointState state;
    uint64_t fingerprint = 0;
  };
  void Run();
  void Log(const std::string& line) const {
    if (log_) log_(line);
  }

  const Send send_;
  const std::function<void(const std::string&)> log_;
  mutable absl::Mutex mu_;
  std::optional<Pending> waiting_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);                    // logged once until a send succeeds
  metrics::Counter* sent_counter_ ABSL_GUARDED_BY(mu_) = nullptr;  // null: not exported
  metrics::Counter* bytes_counter_ ABSL_GUARDED_BY(mu_) = nullptr;
  metrics::Counter* failed_counter_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_REPLICA_CALLS_H_
