#include "server/coordinator_shards.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/tensor_codec.h"

namespace omnilearn {
namespace server {

CoordinatorShards::CoordinatorShards(CoordinatorShardsOptions options) : options_(std::move(options)) {
  slots_.resize(static_cast<size_t>(std::max(1, options_.shards)));
}

absl::StatusOr<int> CoordinatorShards::Register(const v1::ShardHello& hello) {
  if (static_cast<int>(hello.shards()) != options_.shards || hello.partition_bytes() != options_.partition_bytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this shard was started for %d shards of %d-byte partitions, and this coordinator's job has %d shards of "
        "%d-byte partitions: start the shard with the coordinator's --shards and --partition_mb",
        hello.shards(), hello.partition_bytes(), options_.shards, options_.partition_bytes));
  }
  if (hello.address().empty()) return absl::InvalidArgumentError("a shard must say where workers reach it");
  absl::MutexLock lock(&mu_);
  if (stepped_) {
    return absl::FailedPreconditionError(
        "the job has trained already, and a shard joining now would start from the initial slice: restart the job "
        "(shards cannot yet resume a slice from a checkpoint)");
  }
  int index = static_cast<int>(hello.index());
  if (index == 0) {
    for (int i = 1; i < static_cast<int>(slots_.size()) && index == 0; ++i) {
      if (!slots_[i].connected) index = i;
    }
    if (index == 0) return absl::FailedPreconditionError("every slice of this job has its shard already");
  } else if (index >= static_cast<int>(slots_.size()) || slots_[index].connected) {
    return absl::FailedPreconditionError(absl::StrFormat("slice %d is not free (this job has slices 1 to %d)", index,
                                                         static_cast<int>(slots_.size()) - 1));
  }
  Slot& slot = slots_[index];
  slot.address = hello.address();
  slot.connected = true;
  ++slot.generation;
  slot.queue.clear();
  if (map_.has_value()) QueueInit(index);
  for (const auto& [id, secret] : sessions_) {
    Outgoing o;
    o.command.mutable_session()->set_worker_id(id);
    o.command.mutable_session()->set_session_secret(secret);
    slot.queue.push_back(std::move(o));
  }
  if (options_.log) options_.log(absl::StrFormat("shard %d registered from %s", index, slot.address));
  return index;
}

bool CoordinatorShards::Next(int index, Outgoing* out, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const uint64_t generation = slots_[index].generation;
  auto ready = [this, index, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || slots_[index].generation != generation || !slots_[index].queue.empty();
  };
  options_.clock->AwaitWithDeadline(mu_, absl::Condition(&ready), deadline);
  if (shutdown_ || slots_[index].generation != generation) return false;
  if (slots_[index].queue.empty()) {
    out->command.Clear();
    out->values = nullptr;
    return true;
  }
  *out = std::move(slots_[index].queue.front());
  slots_[index].queue.pop_front();
  if (out->command.has_step()) ++slots_[index].steps_sent;
  return true;
}

void CoordinatorShards::Disconnect(int index) {
  absl::MutexLock lock(&mu_);
  slots_[index].connected = false;
  slots_[index].queue.clear();
  if (options_.log) {
    options_.log(absl::StrFormat("shard %d (%s) disconnected%s", index, slots_[index].address,
                                 stepped_ ? ": the job cannot go on without its slice" : ""));
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
    out.push_back(std::move(info));
  }
  return out;
}

void CoordinatorShards::ExportMetrics(metrics::Registry& registry) {
  auto& connected = registry.AddGauge("omnilearn_coordinator_shard_connected",
                                      "1 while the shard server's control stream is open", {"shard"});
  auto& queued = registry.AddGauge("omnilearn_coordinator_shard_queued_commands",
                                   "commands (steps, sessions) not yet sent to the shard server", {"shard"});
  auto& sent = registry.AddGauge("omnilearn_coordinator_shard_steps_sent", "steps sent to the shard server", {"shard"});
  registry.AddCollectHook([this, &connected, &queued, &sent] {
    for (const ShardInfo& s : Shards()) {
      const std::string label = absl::StrCat(s.index);
      connected.Add({label}).Set(s.connected ? 1 : 0);
      queued.Add({label}).Set(static_cast<double>(s.queued));
      sent.Add({label}).Set(static_cast<double>(s.steps_sent));
    }
  });
}

absl::Status CoordinatorShards::AwaitShards(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto all = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t i = 1; i < slots_.size(); ++i) {
      if (!slots_[i].connected) return shutdown_;
    }
    return true;
  };
  if (options_.clock->AwaitWithDeadline(mu_, absl::Condition(&all), deadline) && !shutdown_) return absl::OkStatus();
  std::vector<int> missing;
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (!slots_[i].connected) missing.push_back(static_cast<int>(i));
  }
  return absl::UnavailableError(absl::StrCat("the job's shards ", absl::StrJoin(missing, ", "),
                                             " have not registered with the coordinator yet: retry"));
}

void CoordinatorShards::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

absl::StatusOr<ShardMap> CoordinatorShards::PlanFor(const ModelLayout& layout) {
  {
    absl::MutexLock lock(&mu_);
    if (map_.has_value() && layout_.has_value() && *layout_ == layout) return *map_;
  }
  return ShardMap::Plan(layout, options_.shards, options_.partition_bytes);
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

void CoordinatorShards::FillShardMap(const ShardMap& map, v1::ShardMap* out) const {
  absl::MutexLock lock(&mu_);
  out->set_shards(static_cast<uint32_t>(map.shards()));
  out->set_partition_bytes(options_.partition_bytes);
  out->set_fingerprint(map.fingerprint());
  out->add_addresses(options_.address);
  for (size_t i = 1; i < slots_.size(); ++i) out->add_addresses(slots_[i].address);
}

ModelLayout CoordinatorShards::SliceLayout(int index) const {
  absl::MutexLock lock(&mu_);
  return map_->slice_layout(index);
}

std::optional<ModelLayout> CoordinatorShards::job_layout() const {
  absl::MutexLock lock(&mu_);
  return layout_;
}

void CoordinatorShards::Enqueue(const v1::ShardCommand& command) {
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (slots_[i].connected) slots_[i].queue.push_back(Outgoing{command, nullptr});
  }
}

void CoordinatorShards::QueueInit(int index) {
  Outgoing o;
  v1::ShardInit* init = o.command.mutable_init();
  init->set_index(static_cast<uint32_t>(index));
  *init->mutable_layout() = LayoutToProto(*layout_);
  init->set_version(0);
  *init->mutable_optimizer() = options_.optimizer;
  init->set_fingerprint(map_->fingerprint());
  init->set_sync(options_.sync);
  auto values = std::make_shared<std::vector<float>>(map_->slice_elements(index));
  map_->Gather(index, *initial_, absl::MakeSpan(*values));
  o.values = std::move(values);
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
    if (slots_[i].connected) QueueInit(static_cast<int>(i));
  }
  if (options_.log) options_.log(absl::StrCat("the model is sharded: ", map_->DebugString()));
}

Replication CoordinatorShards::Hooks() {
  Replication r;
  r.model_adopted = [this](const std::string& joiner) { ModelAdopted(joiner); };
  r.session_opened = [this](WorkerId id, const std::string& secret) {
    absl::MutexLock lock(&mu_);
    sessions_[id] = secret;
    v1::ShardCommand c;
    c.mutable_session()->set_worker_id(id);
    c.mutable_session()->set_session_secret(secret);
    Enqueue(c);
  };
  r.session_closed = [this](WorkerId id) {
    absl::MutexLock lock(&mu_);
    sessions_.erase(id);
    v1::ShardCommand c;
    c.mutable_session()->set_worker_id(id);
    c.mutable_session()->set_closed(true);
    Enqueue(c);
  };
  r.step = [this](const ReplicatedStep& step) {
    absl::MutexLock lock(&mu_);
    stepped_ = true;
    v1::ShardCommand c;
    v1::ShardStep* s = c.mutable_step();
    s->set_version(step.version);
    for (const ReplicatedStep::Member& m : step.members) {
      v1::ShardStepMember* pm = s->add_members();
      pm->set_worker_id(m.id);
      pm->set_model_version(m.model_version);
      pm->set_weight(m.weight);
    }
    s->set_update_scale(step.update_scale);
    s->set_learning_rate(step.learning_rate);
    s->set_buffer_blend(step.buffer_blend);
    s->set_momentum(step.momentum);
    Enqueue(c);
  };
  return r;
}

}  // namespace server
}  // namespace omnilearn
