#include "server/daemon/resume.h"

#include <cstdio>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/checkpoint/checkpoint.h"

namespace omnilearn {
namespace server {
namespace {

// A checkpoint is resumed by a server of the same kind: one server's by one server, a
// sharded job's coordinator's by a sharded coordinator.
absl::Status CheckSameKind(const DaemonFlags& f, const CheckpointState& state) {
  const bool sharded = f.shards > 1;
  if (sharded && !state.sharded.has_value()) {
    return absl::FailedPreconditionError(
        "it is one server's checkpoint (or a shard's), and this server is a sharded job's coordinator: start it "
        "without --shards, or start over with --fresh");
  }
  if (!sharded && state.sharded.has_value()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "it is the checkpoint of a sharded job's coordinator: start it with --shards=%d --partition_mb=%g (and the "
        "shard servers on their checkpoint directories), or start over with --fresh",
        state.sharded->shards, static_cast<double>(state.sharded->partition_bytes) / (1 << 20)));
  }
  return absl::OkStatus();
}

// Resumes from `state`, read from `where`: the core restored and, for a sharded coordinator,
// its shards asked to go back with it.
absl::Status ResumeFromState(const DaemonFlags& f, const std::string& where, const CheckpointState& state,
                             ParameterServerCore* core, CoordinatorShards* shards, CheckpointHealth* health) {
  absl::Status s = CheckSameKind(f, state);
  if (s.ok()) s = core->Restore(state);
  if (s.ok() && shards != nullptr) s = shards->Resume(*state.sharded, state.layout);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("cannot resume from ", where, ": ", s.message()));
  health->Resumed(state.version, state.created);
  std::printf("omnilearn_server: resumed from %s: version %lu, %lu samples, %zu workers remembered, %.0f s old\n",
              where.c_str(), state.version, state.global_samples, state.controller.size(),
              absl::ToDoubleSeconds(absl::Now() - state.created));
  std::fflush(stdout);
  return absl::OkStatus();
}

// Resumes from the newest valid checkpoint in `dir`, if there is one. A sharded
// coordinator (`shards`) then waits for its shards to go back with it to the newest
// checkpoint every server holds (docs/SHARDING.md).
absl::Status ResumeFrom(const DaemonFlags& f, const CheckpointDir& dir, ParameterServerCore* core,
                        CoordinatorShards* shards, CheckpointHealth* health) {
  auto loaded = dir.LoadNewest([health](const std::string& warning) {
    std::fprintf(stderr, "omnilearn_server: WARNING: %s\n", warning.c_str());
    health->SkippedCorrupt();
  });
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) {
    if (dir.List().empty()) return absl::OkStatus();
    return absl::DataLossError(
        absl::StrCat("no checkpoint in ", dir.dir(), " could be read: fix or move them, or start over with --fresh"));
  }
  const auto& [file, state] = **loaded;
  return ResumeFromState(f, file, state, core, shards, health);
}

// A sharded job's coordinator goes back to its checkpoints when a shard returns.
void RecoverThrough(Checkpointer* checkpointer, CoordinatorShards* shards) {
  if (shards == nullptr) return;
  shards->SetRecover(
      [checkpointer](const std::vector<std::vector<uint64_t>>& held) { return checkpointer->GoBack(held); });
}

// Every replica of slice 0 at `address` (`versions`, of map `fingerprint`) kept as the
// coordinator's own checkpoints; the job resumed from the newest.
absl::Status TakeJobFromReplicas(const DaemonFlags& f, const PeerCalls& calls, const std::string& address,
                                 const std::vector<uint64_t>& versions, uint64_t fingerprint, ParameterServerCore* core,
                                 CoordinatorShards* shards, Checkpointer* checkpointer, CheckpointHealth* health) {
  const std::shared_ptr<grpc::Channel> channel = PeerChannel(address, calls);
  std::optional<CheckpointState> newest;
  for (uint64_t v : versions) {
    absl::StatusOr<CheckpointState> state = FetchReplica(channel.get(), calls, 0, v, fingerprint);
    if (!state.ok()) return state.status();
    if (absl::Status s = checkpointer->Keep(*state); !s.ok()) return s;
    if (!newest.has_value() || state->version > newest->version) newest = *std::move(state);
  }
  return ResumeFromState(f, absl::StrCat("slice 0's replica of version ", newest->version, " at ", address), *newest,
                         core, shards, health);
}

}  // namespace

void ReplicateCoordinator(const DaemonFlags& f, const PeerCalls& calls, ReplicaSender* sender,
                          ParameterServerCore* core, CoordinatorShards* shards, Checkpointer* checkpointer,
                          CheckpointHealth* health) {
  if (!f.replicate_slices || shards == nullptr || checkpointer == nullptr) return;
  checkpointer->OnWritten([sender, shards](const CheckpointState& state) {
    if (std::optional<std::pair<std::string, uint64_t>> to = shards->ReplicaTarget()) {
      sender->Keep(to->first, state, to->second);
    }
  });
  shards->SetAdopt([=, &f](const std::string& address, const std::vector<uint64_t>& versions, uint64_t fingerprint) {
    return TakeJobFromReplicas(f, calls, address, versions, fingerprint, core, shards, checkpointer, health);
  });
}

bool ReportCheckpoint(const absl::StatusOr<std::string>& written) {
  if (!written.ok()) {
    std::fprintf(stderr, "omnilearn_server: checkpoint failed: %s\n", std::string(written.status().message()).c_str());
    return false;
  }
  if (!written->empty()) {
    std::printf("omnilearn_server: checkpoint %s\n", written->c_str());
    std::fflush(stdout);
  }
  return true;
}

absl::Status SetUpCheckpoints(const DaemonFlags& f, ParameterServerCore* core, CoordinatorShards* shards,
                              std::unique_ptr<Checkpointer>* checkpointer, std::unique_ptr<CheckpointHealth>* health) {
  std::function<void(CheckpointState*)> complete;
  if (shards != nullptr) complete = [shards](CheckpointState* s) { s->sharded = shards->sharded_job(); };
  const std::string path = f.checkpoint_dir;
  if (path.empty() && f.fresh) return absl::InvalidArgumentError("--fresh needs --checkpoint_dir");
  if (path.empty() && shards == nullptr) return absl::OkStatus();
  *health = std::make_unique<CheckpointHealth>(&core->clock(), /*in_memory=*/path.empty());
  (*health)->ExportMetrics(core->registry());
  if (path.empty()) {
    // No disk: every server of the job keeps its newest checkpoints in memory, so that a
    // partition (not a restart) has a version common to every slice to go back to.
    *checkpointer =
        std::make_unique<Checkpointer>(core, std::make_unique<MemoryCheckpoints>(f.checkpoint_keep),
                                       absl::Seconds(f.memory_checkpoint_every_s), std::move(complete), health->get());
    RecoverThrough(checkpointer->get(), shards);
    return absl::OkStatus();
  }
  CheckpointDir dir(path, f.checkpoint_keep);
  if (absl::Status s = dir.Prepare(); !s.ok()) return s;
  if (f.fresh) {
    absl::StatusOr<std::string> aside = dir.MoveAside(absl::Now());
    if (!aside.ok()) return aside.status();
    if (!aside->empty()) std::printf("omnilearn_server: --fresh: moved the old checkpoints to %s\n", aside->c_str());
  }
  *checkpointer =
      std::make_unique<Checkpointer>(core, std::make_unique<CheckpointDir>(dir), absl::Seconds(f.checkpoint_every_s),
                                     std::move(complete), health->get());
  RecoverThrough(checkpointer->get(), shards);
  return f.fresh ? absl::OkStatus() : ResumeFrom(f, dir, core, shards, health->get());
}

}  // namespace server
}  // namespace omnilearn
