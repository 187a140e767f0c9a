#include "server/control/coordinator_shards.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/control/join_check.h"

namespace omnilearn {
namespace server {

namespace {

// The command that opens a worker's session on a shard.
ShardCommand SessionOpened(WorkerId id, const std::string& secret) { return ShardSessionCommand{id, secret, false}; }

}  // namespace

CoordinatorShards::CoordinatorShards(CoordinatorShardsOptions options)
    : options_(std::move(options)), optimizer_(options_.optimizer) {
  slots_.resize(static_cast<size_t>(std::max(1, options_.shards)));
  for (Slot& slot : slots_) slot.missing_since = options_.clock->Now();
}

void CoordinatorShards::SetRecover(Recover recover) {
  absl::MutexLock lock(&mu_);
  recover_ = std::move(recover);
}

void CoordinatorShards::SetAdopt(Adopt adopt) {
  absl::MutexLock lock(&mu_);
  adopt_ = std::move(adopt);
}

absl::StatusOr<int> CoordinatorShards::FreeSlice(const ShardRegistration& hello) const {
  // Range-checked before any cast.
  const uint64_t asked = hello.index;
  if (asked == 0) {
    for (size_t i = 1; i < slots_.size(); ++i) {
      if (!slots_[i].connected) return static_cast<int>(i);
    }
    return absl::FailedPreconditionError("every slice of this job has its shard already");
  }
  if (asked >= slots_.size()) {
    return absl::FailedPreconditionError(absl::StrFormat("there is no slice %d: this job has slices 1 to %d", asked,
                                                         static_cast<int>(slots_.size()) - 1));
  }
  const int index = static_cast<int>(asked);
  if (slots_[index].connected) {
    return absl::UnavailableError(absl::StrFormat(
        "slice %d is held by the shard at %s, still connected: retry (a restarted shard waits until the coordinator "
        "sees its predecessor's stream end)",
        index, slots_[index].address));
  }
  return index;
}

absl::Status CheckShardRegistration(const ShardRegistration& hello, int shards, int64_t partition_bytes) {
  if (hello.shards != static_cast<uint64_t>(shards) || hello.partition_bytes != partition_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this shard was started for %d shards of %d-byte partitions, and this coordinator's job has %d shards of "
        "%d-byte partitions: start the shard with the coordinator's --shards and --partition_mb",
        hello.shards, hello.partition_bytes, shards, partition_bytes));
  }
  const std::string& address = hello.address;
  if (address.empty()) return absl::InvalidArgumentError("a shard must say where workers reach it");
  if (!IsPrintableWord(address, kMaxShardAddressBytes)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a shard's address is a host:port of at most %d printable characters without spaces, not %d bytes",
        kMaxShardAddressBytes, address.size()));
  }
  if (hello.checkpoint_versions.size() > static_cast<size_t>(kMaxShardCheckpoints)) {
    return absl::InvalidArgumentError(absl::StrFormat("a shard lists %d checkpoints; a server keeps at most %d",
                                                      hello.checkpoint_versions.size(), kMaxShardCheckpoints));
  }
  if (hello.replicas.size() > static_cast<size_t>(kMaxShardReplicaSlices)) {
    return absl::InvalidArgumentError(absl::StrFormat("a shard lists replicas of %d slices; at most %d",
                                                      hello.replicas.size(), kMaxShardReplicaSlices));
  }
  for (const auto& [slice, versions] : hello.replicas) {
    if (slice >= static_cast<uint64_t>(shards) || versions.size() > static_cast<size_t>(kMaxShardCheckpoints)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a shard lists %d replicas of slice %d; a job of %d slices keeps at most %d of one",
                          versions.size(), slice, shards, kMaxShardCheckpoints));
    }
  }
  return absl::OkStatus();
}

absl::Status CoordinatorShards::MayTakeSlice(const ShardRegistration& hello) const {
  if (map_.has_value() && hello.fingerprint != 0 && hello.fingerprint != map_->fingerprint()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this shard held a slice of another map (fingerprint %016x; this job's is %016x): it is another job's shard",
        hello.fingerprint, map_->fingerprint()));
  }
  if (!stepped_) return absl::OkStatus();
  if (!recover_) {
    return absl::FailedPreconditionError(
        "the job has trained already, and this coordinator keeps no checkpoints (--checkpoint_dir) to take every "
        "slice back to: restart the job");
  }
  // A slice that has trained goes only to a shard that brings checkpoints to go back to, or
  // whose slice another server keeps a replica of: else the job would have nowhere to go.
  if (hello.checkpoint_versions.empty() && !options_.replicate) {
    return absl::FailedPreconditionError(
        "the job has trained already, and this shard holds no checkpoint of its slice: start it on the slice's "
        "--checkpoint_dir");
  }
  return absl::OkStatus();
}

absl::Status CoordinatorShards::CheckReleaseCan(const ShardRegistration& hello) const {
  struct Need {
    bool needed, can;
    const char* job;     // what the job does, and its flag
    const char* cannot;  // what a shard of an earlier release cannot do for it
  };
  const Need needs[] = {
      {options_.optimizer.clip_grad_norm > 0, hello.reduces_norm,
       "the job clips the global gradient norm (--clip_grad_norm)", "take part in it"},
      {options_.reset_when_done, hello.resets_jobs,
       "the coordinator starts a new job when one ends (--reset_when_done)", "take a new job's slice"},
      {options_.steps_ahead, hello.steps_ahead,
       "the coordinator decides each round ahead for its shards (--shard_steps_ahead)", "step on it"},
  };
  for (const Need& n : needs) {
    if (n.needed && !n.can) {
      return absl::FailedPreconditionError(absl::StrCat(n.job, ", and the shard at ", hello.address,
                                                        " is of a release that cannot ", n.cannot,
                                                        ": run this release's omnilearn_server there"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CoordinatorShards::Register(const ShardRegistration& hello, uint64_t* generation) {
  if (absl::Status s = CheckShardRegistration(hello, options_.shards, options_.partition_bytes); !s.ok()) return s;
  if (absl::Status s = CheckReleaseCan(hello); !s.ok()) return s;
  int index = 0;
  bool adopt = false;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = MayTakeSlice(hello); !s.ok()) return s;
    if (absl::Status s = MayStartOver(hello); !s.ok()) return s;
    absl::StatusOr<int> free = FreeSlice(hello);
    if (!free.ok()) return free.status();
    index = *free;
    Slot& slot = slots_[index];
    slot.address = hello.address;
    slot.connected = true;
    slot.must_register = false;
    ++slot.generation;
    if (generation != nullptr) *generation = slot.generation;
    slot.queue.clear();
    slot.checkpoints = hello.checkpoint_versions;
    slot.replicas = hello.replicas;
    if (options_.log) options_.log(absl::StrFormat("shard %d registered from %s", index, slot.address));
    adopt = WithoutJob() && adopting_.empty() && KeepsSlice0(hello);
    if (adopt) adopting_ = hello.address;
    if (!stepped_ && !adopt) {
      if (map_.has_value()) QueueInit(index, /*restore=*/false, 0);
      for (const auto& [id, secret] : sessions_) slot.queue.push_back(Outgoing{SessionOpened(id, secret), nullptr});
      return index;
    }
  }
  // A coordinator without a job takes it from slice 0's replicas; else a shard's return.
  if (absl::Status s = adopt ? AdoptFrom(hello, index) : Return(index); !s.ok()) return s;
  return index;
}

bool CoordinatorShards::WithoutJob() const {
  // Only the process's first job: a later one (--reset_when_done) is no lost coordinator's.
  return adopt_ && !stepped_ && !map_.has_value() && job_ == 1;
}

bool CoordinatorShards::KeepsSlice0(const ShardRegistration& hello) {
  auto it = hello.replicas.find(0);
  return it != hello.replicas.end() && !it->second.empty();
}

absl::Status CoordinatorShards::MayStartOver(const ShardRegistration& hello) const {
  // A live shard of a job that trained (its map, its checkpoints) at a coordinator without
  // one: that job's coordinator was lost. A first join here would start a new job over its
  // slices; the job is taken from slice 0's replicas instead, which another shard may bring.
  if (!WithoutJob() || hello.fingerprint == 0 || hello.checkpoint_versions.empty() || KeepsSlice0(hello)) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrFormat(
      "this shard holds a slice of a job that trained (map %016x, checkpoints up to version %d), and this "
      "coordinator has no job: it waits for the shard that keeps slice 0's replicas (or start the coordinator on "
      "the job's --checkpoint_dir)",
      hello.fingerprint, *std::max_element(hello.checkpoint_versions.begin(), hello.checkpoint_versions.end())));
}

absl::Status CoordinatorShards::AdoptFrom(const ShardRegistration& hello, int index) {
  if (options_.log) {
    options_.log(absl::StrFormat("the shard at %s keeps slice 0's replicas [%s]: the job goes on from them",
                                 hello.address, absl::StrJoin(hello.replicas.at(0), ", ")));
  }
  Adopt adopt;
  {
    absl::MutexLock lock(&mu_);
    adopt = adopt_;
  }
  const absl::Status adopted = adopt(hello.address, hello.replicas.at(0), hello.fingerprint);
  absl::MutexLock lock(&mu_);
  adopting_.clear();
  if (adopted.ok()) return absl::OkStatus();  // Resume began a recovery: every shard registers again
  const absl::Status refused =
      absl::UnavailableError(absl::StrCat("slice 0's replicas at ", hello.address, " could not be taken (",
                                          adopted.message(), "): the shard registers again"));
  if (options_.log) options_.log(std::string(refused.message()));
  slots_[index].connected = false;  // its registration is refused: the slice is free again
  ++slots_[index].generation;
  return refused;
}

// A registration after the job's first step. The first begins a recovery; the last
// (every slice's shard registered in it) takes every server back to the common checkpoint.
absl::Status CoordinatorShards::Return(int index) {
  std::vector<std::vector<uint64_t>> held;
  Recover recover;
  {
    absl::MutexLock lock(&mu_);
    if (!recovering_) {
      if (options_.log) {
        options_.log(
            absl::StrFormat("shard %d is back: every server goes back to the shards' newest common checkpoint", index));
      }
      BeginRecovery(index);
    }
    slots_[index].recovery = recovery_;
    held.resize(slots_.size());
    for (size_t i = 1; i < slots_.size(); ++i) {
      if (!slots_[i].connected || slots_[i].recovery != recovery_) return absl::OkStatus();  // more to come
    }
    for (size_t i = 1; i < slots_.size(); ++i) held[i] = HeldOf(static_cast<int>(i));
    if (restoring_) return absl::OkStatus();  // two last registrations at once: the other one restores
    restoring_ = true;
    recover = recover_;
  }
  absl::StatusOr<uint64_t> version = recover(held);  // the core's lock: never under ours
  absl::MutexLock lock(&mu_);
  restoring_ = false;
  if (!version.ok()) {
    // No shard's claim ends the job: this one is refused, its slice stays free, and the
    // recovery waits for a shard that holds a checkpoint common to every server.
    slots_[index].connected = false;
    ++slots_[index].generation;
    const absl::Status refused = absl::FailedPreconditionError(
        absl::StrCat("slice ", index, "'s checkpoints leave the job no checkpoint common to every server (",
                     version.status().message(), "): the job waits for a shard that holds one"));
    if (options_.log) options_.log(std::string(refused.message()));
    return refused;
  }
  sessions_.clear();            // the core ended every session: the workers join again
  told_checkpoint_ = *version;  // every server holds it
  for (size_t i = 1; i < slots_.size(); ++i) {
    slots_[i].queue.clear();
    const bool own = absl::c_linear_search(slots_[i].checkpoints, *version);
    const std::string from = own ? "" : ReplicaOf(static_cast<int>(i), *version);
    if (!own && options_.log) {
      options_.log(absl::StrFormat("slice %d comes back from its replica of version %d at %s", i, *version, from));
    }
    QueueInit(static_cast<int>(i), /*restore=*/true, *version, from);
  }
  recovering_ = false;
  if (options_.log) options_.log(absl::StrCat("every slice is back at version ", *version, ": the job goes on"));
  return absl::OkStatus();
}

void CoordinatorShards::BeginRecovery(int returned) {
  recovering_ = true;
  DropNorms();  // the steps from the common checkpoint on are taken again
  ++recovery_;
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (static_cast<int>(i) == returned || !slots_[i].connected) continue;
    slots_[i].connected = false;  // its stream ends: it registers again, with what it holds
    slots_[i].missing_since = options_.clock->Now();
    slots_[i].must_register = true;
    ++slots_[i].generation;
  }
}

absl::Status CoordinatorShards::Resume(const ShardedJob& job, const ModelLayout& slice0) {
  if (job.shards != options_.shards || job.partition_bytes != options_.partition_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the checkpoint is of a job cut into %d shards of %d-byte partitions, and this coordinator was started for %d "
        "of %d-byte partitions (0: the automatic size): start it with --shards=%d --partition_mb=%g, or --fresh",
        job.shards, job.partition_bytes, options_.shards, options_.partition_bytes, job.shards,
        static_cast<double>(job.partition_bytes) / (1 << 20)));
  }
  absl::StatusOr<ShardMap> map =
      ShardMap::Plan(job.layout, options_.shards, options_.partition_bytes, job.whole_tensors);
  if (!map.ok()) return map.status();
  if (!(map->slice_layout(0) == slice0)) {
    return absl::FailedPreconditionError(
        "the checkpoint's slice 0 is not its job's: the file was not written by this "
        "release's coordinator");
  }
  absl::MutexLock lock(&mu_);
  if (!recover_) return absl::FailedPreconditionError("a sharded job resumes only with --checkpoint_dir");
  layout_ = job.layout;
  map_ = *std::move(map);
  stepped_ = true;
  BeginRecovery(/*returned=*/0);
  if (options_.log) {
    options_.log(
        absl::StrFormat("a sharded job (%s): waiting for its %d shard servers to register with the "
                        "checkpoints they hold",
                        map_->DebugString(), options_.shards - 1));
  }
  return absl::OkStatus();
}

std::optional<ShardedJob> CoordinatorShards::sharded_job() const {
  absl::MutexLock lock(&mu_);
  if (!layout_.has_value()) return std::nullopt;
  return ShardedJob{*layout_, options_.shards, options_.partition_bytes, map_->whole_tensors()};
}

absl::Status CoordinatorShards::Next(int index, uint64_t generation, Outgoing* out, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto ready = [this, index, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || slots_[index].generation != generation || !slots_[index].queue.empty();
  };
  options_.clock->AwaitWithDeadline(mu_, absl::Condition(&ready), deadline);
  if (slots_[index].generation != generation) {
    if (slots_[index].must_register) {
      return absl::AbortedError("register again: the job goes back to the shards' newest common checkpoint");
    }
    return absl::CancelledError("another registration took this slice");
  }
  if (slots_[index].queue.empty()) {
    out->command = std::monostate();
    out->values = nullptr;
    return shutdown_ ? absl::CancelledError("the coordinator is shutting down") : absl::OkStatus();
  }
  *out = std::move(slots_[index].queue.front());
  slots_[index].queue.pop_front();
  if (std::holds_alternative<ReplicatedStep>(out->command)) ++slots_[index].steps_sent;
  return absl::OkStatus();
}

uint64_t CoordinatorShards::generation(int index) const {
  absl::MutexLock lock(&mu_);
  return slots_[index].generation;
}

std::optional<std::pair<std::string, uint64_t>> CoordinatorShards::ReplicaTarget() const {
  absl::MutexLock lock(&mu_);
  if (!options_.replicate || !map_.has_value() || slots_.size() < 2 || !slots_[1].connected) return std::nullopt;
  return std::make_pair(slots_[1].address, map_->fingerprint());
}

void CoordinatorShards::Disconnect(int index) {
  absl::MutexLock lock(&mu_);
  if (slots_[index].must_register) return;  // a recovery ended it: not lost
  if (slots_[index].connected) slots_[index].missing_since = options_.clock->Now();
  slots_[index].connected = false;
  slots_[index].queue.clear();
  if (options_.log) {
    const char* then = !stepped_ || shutdown_ ? ""
                       : recover_ ? ": pushes are refused until it is back; then every server goes back to the "
                                    "shards' newest common checkpoint"
                                  : ": the job cannot go on without its slice (no --checkpoint_dir)";
    options_.log(absl::StrFormat("shard %d (%s) disconnected%s", index, slots_[index].address, then));
  }
}

int CoordinatorShards::registered() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (size_t i = 1; i < slots_.size(); ++i) n += slots_[i].connected ? 1 : 0;
  return n;
}

std::vector<CoordinatorShards::ShardInfo> CoordinatorShards::Shards() const {
  absl::MutexLock lock(&mu_);
  std::vector<ShardInfo> out;
  for (size_t i = 1; i < slots_.size(); ++i) {
    const Slot& slot = slots_[i];
    ShardInfo info;
    info.index = static_cast<int>(i);
    info.address = slot.address;
    info.connected = slot.connected;
    info.slice_bytes = map_.has_value() ? map_->slice_elements(static_cast<int>(i)) * int64_t{sizeof(float)} : 0;
    info.steps_sent = slot.steps_sent;
    info.queued = slot.queue.size();
    info.missing_for = slot.connected ? absl::ZeroDuration() : options_.clock->Now() - slot.missing_since;
    if (slot.reported.has_value()) {
      info.checkpoints = Aged(*slot.reported, options_.clock->Now() - slot.reported_at);
    }
    out.push_back(std::move(info));
  }
  return out;
}

absl::Status CoordinatorShards::ReportCheckpoints(int index, uint64_t fingerprint, const CheckpointHealthView& view) {
  absl::MutexLock lock(&mu_);
  if (index < 1 || index >= static_cast<int>(slots_.size()) || !map_.has_value() ||
      map_->fingerprint() != fingerprint) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "checkpoints of slice %d of map %016x: not a shard's slice of this job's map", index, fingerprint));
  }
  slots_[index].reported = view;
  slots_[index].reported_at = options_.clock->Now();
  return absl::OkStatus();
}

void CoordinatorShards::ExportMetrics(metrics::Registry& registry) {
  auto& connected = registry.AddGauge("omnilearn_coordinator_shard_connected",
                                      "1 while the shard server's control stream is open", {"shard"});
  auto& queued = registry.AddGauge("omnilearn_coordinator_shard_queued_commands",
                                   "commands (steps, sessions) not yet sent to the shard server", {"shard"});
  auto& sent = registry.AddGauge("omnilearn_coordinator_shard_steps_sent", "steps sent to the shard server", {"shard"});
  auto& missing = registry.AddGauge("omnilearn_coordinator_shard_missing_seconds",
                                    "how long the slice has had no shard server (0 while connected)", {"shard"});
  auto& age = registry.AddGauge("omnilearn_coordinator_shard_checkpoint_age_seconds",
                                "seconds since the shard's newest good checkpoint, as it last reported", {"shard"});
  auto& failing = registry.AddGauge("omnilearn_coordinator_shard_checkpoint_failing",
                                    "1 while the shard's newest checkpoint attempt failed", {"shard"});
  auto& failures = registry.AddGauge("omnilearn_coordinator_shard_checkpoint_failures",
                                     "checkpoints the shard could not write, as it last reported", {"shard"});
  registry.AddCollectHook([this, &connected, &queued, &sent, &missing, &age, &failing, &failures] {
    for (const ShardInfo& s : Shards()) {
      const std::string label = absl::StrCat(s.index);
      connected.Add({label}).Set(s.connected ? 1 : 0);
      missing.Add({label}).Set(absl::ToDoubleSeconds(s.missing_for));
      queued.Add({label}).Set(static_cast<double>(s.queued));
      sent.Add({label}).Set(static_cast<double>(s.steps_sent));
      if (!s.checkpoints.has_value()) continue;
      age.Add({label}).Set(absl::ToDoubleSeconds(s.checkpoints->newest_age));
      failing.Add({label}).Set(s.checkpoints->failing() ? 1 : 0);
      failures.Add({label}).Set(static_cast<double>(s.checkpoints->failures));
    }
  });
}

std::string CoordinatorShards::WaitingLine() const {
  std::vector<std::string> missing;
  for (const ShardInfo& s : Shards()) {
    if (s.connected) continue;
    missing.push_back(absl::StrFormat("slice %d (last at %s) for %.0f s", s.index,
                                      s.address.empty() ? "none yet" : s.address,
                                      absl::ToDoubleSeconds(s.missing_for)));
  }
  if (missing.empty()) return "";
  return absl::StrCat("training waits for ", absl::StrJoin(missing, ", "));
}

absl::Status CoordinatorShards::Missing() const {
  if (shutdown_) return absl::UnavailableError("the coordinator is shutting down");
  std::vector<int> missing;
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (!slots_[i].connected) missing.push_back(static_cast<int>(i));
  }
  if (!missing.empty()) {
    return absl::UnavailableError(absl::StrCat("the job's shards ", absl::StrJoin(missing, ", "),
                                               " are not registered with the coordinator: retry"));
  }
  if (recovering_) return absl::UnavailableError("the job is going back to the shards' common checkpoint: retry");
  if (!adopting_.empty()) {
    return absl::UnavailableError(
        absl::StrCat("the job is being taken from slice 0's replicas at ", adopting_, ": retry"));
  }
  return absl::OkStatus();
}

absl::Status CoordinatorShards::AwaitShards(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || Missing().code() != absl::StatusCode::kUnavailable;
  };
  options_.clock->AwaitWithDeadline(mu_, absl::Condition(&settled), deadline);
  return Missing();
}

absl::Status CoordinatorShards::Serving() const {
  absl::MutexLock lock(&mu_);
  return Missing();
}

void CoordinatorShards::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

absl::StatusOr<ShardMap> CoordinatorShards::PlanFor(const ModelLayout& layout, std::optional<OptimizerKind> brought) {
  bool whole = false;
  {
    absl::MutexLock lock(&mu_);
    whole = RuleOf(brought.value_or(optimizer_.kind)).whole_tensors;
    if (map_.has_value() && layout_.has_value() && *layout_ == layout && map_->whole_tensors() == whole) return *map_;
  }
  return ShardMap::Plan(layout, options_.shards, options_.partition_bytes, whole);
}

void CoordinatorShards::StashInitial(const std::string& joiner, const ModelLayout& layout, ShardMap map,
                                     std::shared_ptr<const std::vector<float>> values) {
  absl::MutexLock lock(&mu_);
  stashed_.insert_or_assign(joiner, Stashed{layout, std::move(map), std::move(values)});
}

void CoordinatorShards::ForgetInitial(const std::string& joiner) {
  absl::MutexLock lock(&mu_);
  stashed_.erase(joiner);
}

ShardMapAnswer CoordinatorShards::Answer(const ShardMap& map) const {
  absl::MutexLock lock(&mu_);
  ShardMapAnswer a;
  a.shards = map.shards();
  a.partition_bytes = options_.partition_bytes;
  a.fingerprint = map.fingerprint();
  a.push_in_order = options_.push_in_order;
  a.whole_tensors = map.whole_tensors();
  a.addresses.push_back(options_.address);
  for (size_t i = 1; i < slots_.size(); ++i) a.addresses.push_back(slots_[i].address);
  return a;
}

ModelLayout CoordinatorShards::SliceLayout(int index) const {
  absl::MutexLock lock(&mu_);
  return map_->slice_layout(index);
}

std::optional<ModelLayout> CoordinatorShards::job_layout() const {
  absl::MutexLock lock(&mu_);
  return layout_;
}

std::optional<ShardMap> CoordinatorShards::map() const {
  absl::MutexLock lock(&mu_);
  return map_;
}

void CoordinatorShards::Enqueue(const ShardCommand& command) {
  Enqueue([&command](int) { return command; });
}

void CoordinatorShards::Enqueue(const std::function<ShardCommand(int index)>& command_for) {
  if (recovering_) return;  // every slice is about to be restored: nothing before it counts
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (slots_[i].connected) slots_[i].queue.push_back(Outgoing{command_for(static_cast<int>(i)), nullptr});
  }
}

std::string CoordinatorShards::ReplicaHolder(int index) const {
  return static_cast<size_t>(index) + 1 < slots_.size() ? slots_[index + 1].address : options_.address;
}

std::vector<std::pair<std::string, std::vector<uint64_t>>> CoordinatorShards::ReplicasOf(int index) const {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> out;
  for (const Slot& slot : slots_) {
    if (auto it = slot.replicas.find(static_cast<uint64_t>(index)); slot.connected && it != slot.replicas.end()) {
      out.emplace_back(slot.address, it->second);
    }
  }
  if (options_.own_replicas) {
    const std::map<int, std::vector<uint64_t>> own = options_.own_replicas();
    if (auto it = own.find(index); it != own.end()) out.emplace_back(options_.address, it->second);
  }
  return out;
}

std::vector<uint64_t> CoordinatorShards::HeldOf(int index) const {
  std::vector<uint64_t> held = slots_[index].checkpoints;
  for (const auto& [address, versions] : ReplicasOf(index)) held.insert(held.end(), versions.begin(), versions.end());
  std::sort(held.rbegin(), held.rend());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  return held;
}

std::string CoordinatorShards::ReplicaOf(int index, uint64_t version) const {
  for (const auto& [address, versions] : ReplicasOf(index)) {
    if (absl::c_linear_search(versions, version)) return address;
  }
  return "";
}

void CoordinatorShards::QueueInit(int index, bool restore, uint64_t version, const std::string& replica_from) {
  Outgoing o;
  ShardInitCommand init;
  init.index = index;
  init.layout = *layout_;
  init.version = version;
  init.fingerprint = map_->fingerprint();
  init.optimizer = optimizer_;
  init.member_wait = options_.member_wait;
  init.sync = options_.sync;
  init.restore = restore;
  init.job = job_;
  init.whole_tensors = map_->whole_tensors();
  init.replica_from = replica_from;
  o.command = std::move(init);
  if (!restore) {
    auto values = std::make_shared<std::vector<float>>(map_->slice_elements(index));
    map_->Gather(index, *initial_, absl::MakeSpan(*values));
    o.values = std::move(values);
  }
  slots_[index].queue.push_back(std::move(o));
}

void CoordinatorShards::ModelAdopted(const std::string& joiner) {
  absl::MutexLock lock(&mu_);
  auto it = stashed_.find(joiner);
  if (it == stashed_.end()) return;  // cannot happen: the service stashes before the core's Join
  layout_ = std::move(it->second.layout);
  initial_ = std::move(it->second.values);
  map_ = std::move(it->second.map);
  stashed_.erase(it);
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (slots_[i].connected) QueueInit(static_cast<int>(i), /*restore=*/false, 0);
  }
  if (options_.log) {
    options_.log(absl::StrCat("the model is sharded: ", map_->DebugString(),
                              options_.push_in_order ? "; workers push the slices one after the other" : ""));
  }
}

void CoordinatorShards::JobReset(uint64_t job) {
  absl::MutexLock lock(&mu_);
  job_ = job;
  stepped_ = false;
  layout_.reset();
  map_.reset();
  initial_.reset();
  sessions_.clear();
  told_checkpoint_.reset();
  DropNorms();
  if (options_.log)
    options_.log(absl::StrFormat("job %d: the next model goes to every shard in place of its slice", job));
}

void CoordinatorShards::DropNorms() {
  for (auto& [version, parts] : norms_) parts->closed = true;  // a waiting call returns
  norms_.clear();
}

bool CoordinatorShards::NormStalled(const NormParts& parts) const {
  if (shutdown_ || recovering_) return true;
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (!parts.given[i] && !slots_[i].connected) return true;
  }
  return false;
}

absl::StatusOr<double> CoordinatorShards::ReduceNorm(uint64_t version, int index, double sum_squares,
                                                     absl::Time deadline) {
  if (index < 0 || index >= options_.shards || !std::isfinite(sum_squares) || sum_squares < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a norm part of slice %d (%g): not a slice of %d, or not a squared norm", index, sum_squares, options_.shards));
  }
  absl::MutexLock lock(&mu_);
  while (!norms_.empty() && norms_.begin()->first + 8 < version) norms_.erase(norms_.begin());
  std::shared_ptr<NormParts>& slot = norms_[version];
  if (slot == nullptr) {
    slot = std::make_shared<NormParts>();
    slot->given.assign(options_.shards, false);
  }
  const std::shared_ptr<NormParts> held = slot;  // a recovery or a new job may drop it from the map
  NormParts& parts = *held;
  if (parts.closed) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the step leaving version %d went on without slice %d's norm (it came too late)", version, index));
  }
  if (parts.given[index]) {
    return absl::InvalidArgumentError(absl::StrFormat("slice %d gave its norm of version %d twice", index, version));
  }
  parts.given[index] = true;
  parts.sum += sum_squares;
  ++parts.count;
  auto done = [this, &parts]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return parts.count == options_.shards || parts.closed || NormStalled(parts);
  };
  while (!done() && options_.clock->Now() < deadline)
    options_.clock->AwaitWithDeadline(mu_, absl::Condition(&done), deadline);
  if (parts.count == options_.shards) return parts.sum;
  if (index != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the step leaving version %d went on without every slice's norm", version));
  }
  parts.closed = true;
  if (options_.log) {
    options_.log(
        absl::StrFormat("the step leaving version %d clips by the norm of %d of %d slices: the others' did "
                        "not come",
                        version, parts.count, options_.shards));
  }
  return parts.sum;
}

Replication CoordinatorShards::Hooks() {
  Replication r;
  r.model_adopted = [this](const std::string& joiner) { ModelAdopted(joiner); };
  r.optimizer = [this](const OptimizerOptions& optimizer) {
    absl::MutexLock lock(&mu_);
    optimizer_ = optimizer;
  };
  r.session_opened = [this](WorkerId id, const std::string& secret) {
    absl::MutexLock lock(&mu_);
    sessions_[id] = secret;
    Enqueue(SessionOpened(id, secret));
  };
  r.session_closed = [this](WorkerId id) {
    absl::MutexLock lock(&mu_);
    sessions_.erase(id);
    Enqueue(ShardSessionCommand{id, "", /*closed=*/true});
  };
  r.step = [this](const ReplicatedStep& step) {
    absl::MutexLock lock(&mu_);
    stepped_ = true;
    Enqueue(step);
  };
  if (options_.steps_ahead && options_.sync) {
    r.round_ahead = [this](const RoundAhead& round) {
      absl::MutexLock lock(&mu_);
      Enqueue(round);
    };
  }
  if (options_.optimizer.clip_grad_norm > 0) {
    r.norm = [this](uint64_t version, double sum_squares) {
      absl::StatusOr<double> total = ReduceNorm(version, 0, sum_squares, options_.clock->Now() + options_.norm_wait);
      return total.ok() ? *total : sum_squares;  // slice 0's part is never refused
    };
  }
  r.job_reset = [this](uint64_t job) { JobReset(job); };
  r.checkpoint = [this](uint64_t version, uint64_t history) {
    absl::MutexLock lock(&mu_);
    if (version == told_checkpoint_) return;  // a checkpoint interval without a step
    told_checkpoint_ = version;
    // Async slices may differ by design (a step left a member out): their history is not checked.
    Enqueue([&](int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return ShardCheckpointCommand{version, options_.sync ? history : 0,
                                    options_.replicate ? ReplicaHolder(index) : ""};
    });
  };
  return r;
}

}  // namespace server
}  // namespace omnilearn
