#include "server/daemon/coordinator_daemon.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "server/checkpoint/checkpointer.h"
#include "server/checkpoint/replica_store.h"
#include "server/control/coordinator_shards.h"
#include "server/control/parameter_server_core.h"
#include "server/daemon/election.h"
#include "server/daemon/exit.h"
#include "server/daemon/lifecycle.h"
#include "server/daemon/network.h"
#include "server/daemon/options.h"
#include "server/daemon/results.h"
#include "server/daemon/resume.h"
#include "server/rpc/service.h"
#include "server/rpc/shard_wire.h"

namespace omnilearn {
namespace server {
namespace {

// A sharded job's coordinator side (--shards > 1): what every shard must share with it.
// `replicas`: the last slice's replicas, which the coordinator keeps.
std::unique_ptr<CoordinatorShards> MakeCoordinatorShards(const DaemonFlags& f, const ServerOptions& o,
                                                         const ReplicaStore* replicas) {
  CoordinatorShardsOptions so;
  so.shards = f.shards;
  so.partition_bytes = PartitionBytes(f);
  so.address = AdvertisedAddress(f, f.port);
  so.optimizer = o.optimizer;
  so.member_wait = o.round_timeout;
  so.log = o.log;
  so.sync = o.mode == Mode::kSync;
  // A clipped step's norm waits while the shards wait for their members' slices.
  so.norm_wait = o.round_timeout + absl::Seconds(30);
  so.reset_when_done = o.reset_when_done;
  so.push_in_order = f.push_slices_in_order;
  so.steps_ahead = f.shard_steps_ahead;
  so.replicate = f.replicate_slices;
  so.own_replicas = [replicas] { return replicas->Held(); };
  return std::make_unique<CoordinatorShards>(so);
}

// Serves (and checkpoints) until a signal or the job's end, tells the workers to stop and
// writes the results; returns the exit status.
int ServeUntilEnd(const DaemonFlags& f, const sigset_t& signals, ParameterServerCore* core, Checkpointer* checkpointer,
                  CoordinatorShards* shards, const PeerAccess& peers, absl::Time start) {
  std::atomic<bool> stopping{false};
  std::thread monitor([&] { Monitor(f, core, checkpointer, shards, &stopping); });
  AwaitSignalOrEnd(f, signals, core);
  TellWorkersToStop(f, core);
  stopping.store(true);
  monitor.join();
  return WriteResults(f, core, checkpointer, shards, peers, start);
}

}  // namespace

int RunCoordinator(const DaemonFlags& f, const sigset_t& signals) {
  v1::WireDtype wire_dtype = v1::WIRE_DTYPE_F32;
  absl::StatusOr<ServerOptions> o = OptionsFromFlags(f, &wire_dtype);
  if (!o.ok()) return Fail(o.status(), 2);
  if (absl::Status s = CheckShardable(f, *o); !s.ok()) return Fail(s, 2);
  // A candidate (--election) stands by until it holds the job's key; it keeps the lease to the end.
  absl::StatusOr<std::unique_ptr<Leadership>> elected = WinElection(f, signals);
  if (!elected.ok()) return NotElected(elected.status());
  std::unique_ptr<CoordinatorShards> shards;
  ReplicaStore replicas(f.checkpoint_keep);
  if (f.shards > 1) {
    shards = MakeCoordinatorShards(f, *o, &replicas);
    o->replication = shards->Hooks();
  }
  auto core = ParameterServerCore::Create(*o);
  if (!core.ok()) return Fail(core.status(), 2);
  absl::StatusOr<std::string> token = TokenFromFlags(f);
  if (!token.ok()) return Fail(token.status(), 2);
  absl::StatusOr<PeerAccess> peers = PeerAccessFromFlags(f, shards != nullptr, *token);
  if (!peers.ok()) return Fail(peers.status(), 2);
  if (shards != nullptr) {
    shards->ExportMetrics((*core)->registry());
    replicas.ExportMetrics((*core)->registry());
  }
  std::unique_ptr<CheckpointHealth> checkpoint_health;  // before the exposer, which reads it
  auto exposer = ExposeMetrics(f, (*core)->registry());
  if (!exposer.ok()) return Fail(exposer.status(), 1);

  ParameterServerService service(core->get(), absl::Minutes(10), *token, LimitsFromFlags(f), wire_dtype);
  if (shards != nullptr) service.EnableShards(shards.get(), peers->peer_token, &replicas);
  // Listening comes first: a second server on this port fails before it reads (or locks)
  // the checkpoints; calls wait (UNAVAILABLE, retried) until the resume is done.
  service.Hold();
  int bound_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server = ListenOnFlags(f, &service, &service.peers(), &bound_port);
  if (!server.ok()) return FailToListen(server.status());
  std::unique_ptr<Checkpointer> checkpointer;
  if (absl::Status s = SetUpCheckpoints(f, core->get(), shards.get(), &checkpointer, &checkpoint_health); !s.ok()) {
    return Fail(s, 2);
  }
  const PeerCalls peer_calls{peers->credentials, peers->peer_token};
  ReplicaSender replica_sender(peer_calls, o->log);
  replica_sender.ExportMetrics((*core)->registry());
  ReplicateCoordinator(f, peer_calls, &replica_sender, core->get(), shards.get(), checkpointer.get(),
                       checkpoint_health.get());
  service.ShowCheckpoints(checkpoint_health.get());
  service.Open();
  const absl::Time start = absl::Now();
  PrintListening(f, *o, bound_port, wire_dtype, !token->empty(), exposer->get());

  const int rc = ServeUntilEnd(f, signals, core->get(), checkpointer.get(), shards.get(), *peers, start);
  if (*elected != nullptr && (*core)->Snapshot().job_finished) (*elected)->MarkJobFinished();
  if (shards != nullptr) shards->Shutdown();  // their streams end once the last commands went
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return rc;
}

}  // namespace server
}  // namespace omnilearn
