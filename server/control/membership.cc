#include "server/control/membership.h"

#include <algorithm>
#include <map>
#include <set>

namespace omnilearn {
namespace server {

std::string WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kActive:
      return "active";
    case WorkerState::kPending:
      return "pending";
    case WorkerState::kDropped:
      return "dropped";
    case WorkerState::kLeft:
      return "left";
  }
  return "unknown";
}

WorkerRecord& Membership::Add(WorkerRecord w) {
  w.id = next_id_++;
  const WorkerId id = w.id;
  return workers_.emplace(id, std::move(w)).first->second;
}

WorkerRecord* Membership::Find(WorkerId id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const WorkerRecord* Membership::Find(WorkerId id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

WorkerRecord* Membership::FindCurrent(WorkerId id) {
  WorkerRecord* w = Find(id);
  return w != nullptr && w->state != WorkerState::kLeft ? w : nullptr;
}

const WorkerRecord* Membership::CurrentNamed(const std::string& name, WorkerId except) const {
  for (const auto& [id, w] : workers_) {
    if (w.name == name && w.state != WorkerState::kLeft && id != except) return &w;
  }
  return nullptr;
}

void WorkerRecord::NotePush(absl::Time now) {
  if (last_push_at != absl::InfinitePast() && now > last_push_at) {
    const double seconds = absl::ToDoubleSeconds(now - last_push_at);
    push_interval = push_interval > 0 ? 0.75 * push_interval + 0.25 * std::min(seconds, 4 * push_interval) : seconds;
  }
  last_push_at = now;
}

size_t Membership::LiveCount() const {
  size_t n = 0;
  for (const auto& [id, w] : workers_) n += w.live() ? 1 : 0;
  return n;
}

std::optional<uint64_t> Membership::SlowestClock(WorkerId except) const {
  std::optional<uint64_t> slowest;
  for (const auto& [id, w] : workers_) {
    if (id != except && w.live()) slowest = std::min(slowest.value_or(w.clock), w.clock);
  }
  return slowest;
}

std::vector<WorkerRecord*> Membership::Missing(const std::function<bool(WorkerId)>& pushed) {
  std::vector<WorkerRecord*> out;
  for (auto& [id, w] : workers_) {
    if (w.state == WorkerState::kActive && !pushed(id)) out.push_back(&w);
  }
  return out;
}

std::vector<WorkerId> Membership::ActiveIds() const {
  std::vector<WorkerId> out;
  for (const auto& [id, w] : workers_) {
    if (w.state == WorkerState::kActive) out.push_back(id);
  }
  return out;
}

void Membership::PromotePending() {
  for (auto& [id, w] : workers_) {
    if (w.state == WorkerState::kPending) w.state = WorkerState::kActive;
  }
}

bool Membership::WithinSspBound(WorkerId id, uint64_t bound) const {
  const WorkerRecord* me = Find(id);
  if (me == nullptr || !me->live()) return true;
  const std::optional<uint64_t> slowest = SlowestClock(id);
  return !slowest || me->clock <= *slowest + bound;
}

std::vector<WorkerRecord*> Membership::HoldingBack(WorkerId id, uint64_t bound) {
  std::vector<WorkerRecord*> out;
  const WorkerRecord* me = Find(id);
  if (me == nullptr) return out;
  for (auto& [other, w] : workers_) {
    if (other != id && w.live() && w.clock + bound < me->clock) out.push_back(&w);
  }
  return out;
}

std::vector<WorkerRecord*> Membership::LeaseExpired(absl::Time now, absl::Duration lease) {
  std::vector<WorkerRecord*> out;
  for (auto& [id, w] : workers_) {
    if (w.state != WorkerState::kLeft && now - w.last_seen > lease) out.push_back(&w);
  }
  return out;
}

bool Membership::AllLeft() const {
  return std::all_of(workers_.begin(), workers_.end(),
                     [](const auto& entry) { return entry.second.state == WorkerState::kLeft; });
}

std::map<std::string, WorkerId> Membership::NewestIds() const {
  std::map<std::string, WorkerId> newest;
  for (const auto& [id, w] : workers_) newest[w.name] = id;  // ids ascend
  return newest;
}

std::set<std::string> Membership::UnheardNames() const {
  std::set<std::string> unheard;
  for (const auto& [name, id] : NewestIds()) {
    const WorkerRecord& w = workers_.at(id);
    if (w.state == WorkerState::kLeft && w.ended_unheard) unheard.insert(name);
  }
  return unheard;
}

std::vector<std::string> Membership::PruneLeft(size_t max_left) {
  // The newest session (highest id) of each name, and the left records, oldest first.
  const std::map<std::string, WorkerId> newest = NewestIds();
  std::vector<WorkerId> left;
  for (const auto& [id, w] : workers_) {
    if (w.state == WorkerState::kLeft) left.push_back(id);
  }
  std::set<std::string> erased;
  size_t kept = left.size();
  for (WorkerId id : left) {
    const std::string& name = workers_.at(id).name;
    if (newest.at(name) != id || kept > max_left) {
      erased.insert(name);
      workers_.erase(id);
      --kept;
    }
  }
  for (const auto& [id, w] : workers_) erased.erase(w.name);
  return std::vector<std::string>(erased.begin(), erased.end());
}

}  // namespace server
}  // namespace omnilearn
