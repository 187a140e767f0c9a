#include "server/daemon/shard_daemon.h"

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/etcd_client.h"
#include "server/daemon/exit.h"
#include "server/daemon/network.h"
#include "server/daemon/options.h"
#include "server/data/shard_core.h"
#include "server/rpc/replica_calls.h"
#include "server/rpc/service.h"
#include "server/rpc/shard_link.h"
#include "server/rpc/shard_server_service.h"

namespace omnilearn {
namespace server {
namespace {

// A shard's link to its coordinator, from the flags.
ShardLinkOptions LinkOptionsFromFlags(const DaemonFlags& f, int bound_port, const std::string& peer_token,
                                      std::shared_ptr<grpc::ChannelCredentials> credentials,
                                      std::function<void(const std::string&)> log) {
  ShardLinkOptions lo;
  lo.coordinator = f.coordinator;
  lo.address = AdvertisedAddress(f, bound_port);
  lo.shards = f.shards;
  lo.partition_bytes = PartitionBytes(f);
  lo.index = f.shard_index;
  lo.peer_token = peer_token;
  lo.credentials = std::move(credentials);
  lo.start_timeout = absl::Seconds(f.start_timeout_s);
  lo.checkpoint_dir = f.checkpoint_dir;
  lo.checkpoint_keep = f.checkpoint_keep;
  lo.log = std::move(log);
  return lo;
}

// With --coordinator=etcd://...: the elected coordinator's address, read before each registration.
absl::Status FollowElection(const DaemonFlags& f, ShardLinkOptions* lo) {
  if (!IsEtcdAddress(f.coordinator)) return absl::OkStatus();
  absl::StatusOr<EtcdTarget> target = ParseEtcdTarget(f.coordinator);
  if (!target.ok()) return absl::InvalidArgumentError(absl::StrCat("--coordinator: ", target.status().message()));
  auto etcd = std::make_shared<EtcdClient>(*target);
  lo->resolve_coordinator = [etcd] { return etcd->Coordinator(); };
  return absl::OkStatus();
}

// Runs the link until it ends or a signal comes; what it ended with (OK after a signal).
absl::Status RunLinkUntilSignal(ShardLink& link, const sigset_t& signals) {
  absl::Status ended;
  std::atomic<bool> link_done{false};
  std::thread runner([&] {
    ended = link.Run();
    link_done.store(true);
  });
  const timespec tick = {0, 200 * 1000 * 1000};
  while (!link_done.load()) {
    if (sigtimedwait(&signals, nullptr, &tick) > 0) break;
  }
  link.Stop();
  runner.join();
  return ended;
}

}  // namespace

int RunShard(const DaemonFlags& f, const sigset_t& signals) {
  if (absl::Status s = CheckFlags(f); !s.ok()) return Fail(s, 2);
  const auto log = [](const std::string& line) {
    std::printf("omnilearn_server (shard): %s\n", line.c_str());
    std::fflush(stdout);
  };
  ShardCore shard({Clock::Real(), log});
  absl::StatusOr<std::string> token = TokenFromFlags(f);
  if (!token.ok()) return Fail(token.status(), 2);
  absl::StatusOr<std::string> peer_token = PeerTokenFromFlags(f, *token);
  if (!peer_token.ok()) return Fail(peer_token.status(), 2);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> peer_credentials = PeerCredentials(f);
  if (!peer_credentials.ok()) return Fail(peer_credentials.status(), 2);
  // A session's dtype is the coordinator's choice at Join: a shard reads and writes either.
  ShardServerService service(&shard, absl::Minutes(10), *token, LimitsFromFlags(f), v1::WIRE_DTYPE_BF16);
  // The peer plane answers a caller with the secret that this is no coordinator; others, UNAUTHENTICATED.
  // It keeps the replica of the slice before its own (ShardLink names them when it registers).
  ReplicaStore replicas(f.checkpoint_keep);
  replicas.ExportMetrics(shard.registry());
  service.peers().Enable(/*shards=*/nullptr, *peer_token, &replicas);
  int bound_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = ListenOnFlags(f, &service, &service.peers(), &bound_port);
  if (!server.ok()) return FailToListen(server.status());
  // Before the exposer, which reads it at each scrape.
  CheckpointHealth checkpoint_health(Clock::Real(), /*in_memory=*/f.checkpoint_dir.empty());
  checkpoint_health.ExportMetrics(shard.registry());
  auto exposer = ExposeMetrics(f, shard.registry());
  if (!exposer.ok()) return Fail(exposer.status(), 1);
  ShardLinkOptions lo = LinkOptionsFromFlags(f, bound_port, *peer_token, *peer_credentials, log);
  if (absl::Status s = FollowElection(f, &lo); !s.ok()) return Fail(s, 2);
  lo.health = &checkpoint_health;
  lo.replicas = &replicas;
  ReplicaSender replica_sender(PeerCalls{*peer_credentials, *peer_token}, log);
  replica_sender.ExportMetrics(shard.registry());
  lo.keep_replica = [&replica_sender](const std::string& to, const CheckpointState& state, uint64_t fingerprint) {
    replica_sender.Keep(to, state, fingerprint);
  };
  std::printf("omnilearn_server (shard) listening on %s:%d as %s, coordinator %s, metrics %s\n", f.bind.c_str(), f.port,
              lo.address.c_str(), lo.coordinator.c_str(),
              *exposer ? absl::StrCat(f.metrics_bind, ":", (*exposer)->port(), "/metrics").c_str() : "off");
  std::fflush(stdout);
  ShardLink link(lo, &shard);
  if (absl::Status s = link.Prepare(); !s.ok()) return Fail(s, 2);
  if (lo.checkpoint_dir.empty()) {
    log("no --checkpoint_dir: the slice's checkpoints are kept in memory (a partition is survived, a restart of this "
        "shard is not)");
  }
  const absl::Status ended = RunLinkUntilSignal(link, signals);
  shard.Shutdown();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (!ended.ok()) {
    std::fprintf(stderr, "omnilearn_server (shard): %s\n", std::string(ended.message()).c_str());
    return 1;
  }
  std::printf("omnilearn_server (shard): stopped; slice at version %lu; %s\n", shard.version(),
              shard.StepWaitSummary().c_str());
  return 0;
}

}  // namespace server
}  // namespace omnilearn
