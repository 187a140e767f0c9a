// A shard server's link to its coordinator (docs/SHARDING.md): registers over the Shard
// call and applies what the coordinator sends (the slice's first values, sessions, steps)
// to the shard's data plane, in order.
#ifndef OMNILEARN_SERVER_RPC_SHARD_LINK_H_
#define OMNILEARN_SERVER_RPC_SHARD_LINK_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/omnilearn.pb.h"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/replica_store.h"
#include "server/data/shard_core.h"
#include "server/rpc/replica_calls.h"
#include "server/rpc/shard_apply.h"

namespace omnilearn {
namespace server {

struct ShardLinkOptions {
  std::string coordinator;  // host:port (at first, with resolve_coordinator)
  // Where the coordinator is now (an elected one's address, read from etcd), asked before
  // each registration; an error is retried as an unreachable coordinator, but
  // FailedPrecondition (the job finished) ends the link. Unset: `coordinator`.
  std::function<absl::StatusOr<std::string>()> resolve_coordinator;
  std::string address;  // where workers reach this shard
  int shards = 2;
  int64_t partition_bytes = 0;
  int index = 0;  // 0 = any free slice
  // The job's peer secret (--peer_token_file): the Shard call carries it, never the
  // workers' bearer token. Empty: a job whose servers all listen on loopback.
  std::string peer_token;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  absl::Duration start_timeout = absl::Minutes(5);  // to reach the coordinator at first
  // The link pings the coordinator this often and counts it lost when a ping is not
  // answered within as long again (its host gone without closing the connection). At
  // least the 4 s servers accept (ConfigureServerBuilder).
  absl::Duration keepalive = absl::Seconds(5);
  // The slice's checkpoints, at the versions the coordinator names (empty = none: a
  // restart of this shard cannot resume the job).
  std::string checkpoint_dir;
  int checkpoint_keep = 3;
  std::function<void(const std::string&)> log;
  // Opens one registration (Shard) on `ctx` with `hello`, through ParameterServer when
  // `legacy`: a coordinator of the previous release. Unset: over a channel to
  // `coordinator` with the keepalive above (tests give a fake coordinator, and step_norm
  // when their job clips).
  std::function<std::unique_ptr<grpc::ClientReaderInterface<v1::ShardCommand>>(
      grpc::ClientContext* ctx, const v1::ShardHello& hello, bool legacy)>
      open;
  const Clock* clock = Clock::Real();  // start_timeout and the pause before registering again
  // A clipped job's norm reduction (ServerPeers.StepNorm). Unset: over a channel to
  // `coordinator` with the peer secret (with `open` set: none).
  StepNormCall step_norm;
  // The slice's checkpoints as the operator sees them (null: not kept), reported after
  // each checkpoint through report_checkpoints (ServerPeers.ReportCheckpoints; unset: over
  // a channel to `coordinator` with the peer secret, with `open` set: not reported).
  CheckpointHealth* health = nullptr;
  ReportCheckpointsCall report_checkpoints;
  // The other slices' replicas this server keeps (its registration names them; null: none).
  const ReplicaStore* replicas = nullptr;
  // Its own slice's replica, sent where each checkpoint command says (unset: none sent; the
  // daemon gives its ReplicaSender's), and a replica fetched when a restore names one (unset:
  // over the network with the peer secret; with `open` set: a restore from a replica is refused).
  KeepReplicaCall keep_replica;
  FetchReplicaCall fetch_replica;
};

// The channel to the coordinator, shared by the shard's calls to it (its registrations,
// norm reductions and checkpoint reports), made again when the coordinator's address
// changes. Thread-safe.
class CoordinatorChannels {
 public:
  explicit CoordinatorChannels(const ShardLinkOptions& options);
  std::shared_ptr<grpc::Channel> Get();
  std::string address();
  // True when `address` is another than the one before.
  bool Set(const std::string& address);

 private:
  const absl::Duration keepalive_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);  // to address_, made at first use
};

// Thread-safe: Run on one thread, Stop from any.
class ShardLink {
 public:
  ShardLink(ShardLinkOptions options, ShardCore* shard);
  // Creates the checkpoint directory (and clears a crash's partial files).
  absl::Status Prepare();

  // Registers (retrying while the coordinator cannot be reached or the slice is still
  // held by a predecessor, up to start_timeout) and applies the commands until Stop()
  // (OK), the job's end (OK) or an error: the coordinator refused this shard (its
  // message), stayed away for start_timeout, or sent something this shard cannot apply
  // (a layout whose map differs, a missed step, a checkpoint it cannot write or read).
  // When the coordinator asks (ABORTED: the job goes back to a common checkpoint), offers
  // another slice than this shard's, or the link breaks (a partition, or a restarting
  // coordinator), it registers again, asking for the slice it holds.
  absl::Status Run();
  void Stop();

 private:
  // One registration's stream; `*registered` once the coordinator accepted it.
  absl::Status RunOnce(bool* registered);
  v1::ShardHello Hello() const;
  // Asks resolve_coordinator where the coordinator is (OK without one); Unavailable when it cannot say.
  absl::Status FindCoordinator();

  const ShardLinkOptions options_;
  const std::shared_ptr<CoordinatorChannels> coordinator_;
  ShardApplier applier_;  // Run's thread only
  // The coordinator serves the Shard call only under ParameterServer (the previous
  // release): found at the first registration, kept. Run's thread only.
  bool legacy_coordinator_ = false;
  absl::Mutex mu_;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// A shard server's slice at exactly `version`, pulled under the session `session` and
// its secret (the coordinator's own, for the export); it waits up to `timeout` for the
// slice to reach the version. `history` (0: not checked) is slice 0's step history at
// `version`: a slice whose own differs (it took other members in some step) is refused
// FailedPrecondition, as not one model with slice 0.
absl::StatusOr<std::vector<float>> PullSlice(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                             const std::string& auth_token, uint64_t session, const std::string& secret,
                                             const ModelLayout& slice, uint64_t version, uint64_t history,
                                             absl::Duration timeout);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SHARD_LINK_H_
