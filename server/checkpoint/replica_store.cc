#include "server/checkpoint/replica_store.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "server/checkpoint/checkpoint.h"

namespace omnilearn {
namespace server {

absl::Status ReplicaStore::Keep(int index, uint64_t version, uint64_t fingerprint, std::string bytes) {
  if (bytes.size() > kMaxReplicaBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a replica of %d bytes: more than the %d a server keeps", bytes.size(), kMaxReplicaBytes));
  }
  // Read back before it is kept: a replica that cannot restore its slice is worth nothing.
  absl::StatusOr<CheckpointState> state = DecodeCheckpoint(bytes);
  if (!state.ok()) return state.status();
  if (state->slice != index || state->version != version) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a replica said to be slice %d at version %d holds slice %d at version %d", index, version,
                        state->slice, state->version));
  }
  auto kept = std::make_shared<const std::string>(std::move(bytes));
  absl::MutexLock lock(&mu_);
  if (fingerprint != fingerprint_) {
    held_.clear();
    fingerprint_ = fingerprint;
  }
  std::map<uint64_t, std::shared_ptr<const std::string>>& versions = held_[index];
  versions[version] = std::move(kept);
  while (versions.size() > static_cast<size_t>(keep_)) versions.erase(versions.begin());
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const std::string>> ReplicaStore::Get(int index, uint64_t version,
                                                                     uint64_t fingerprint) const {
  absl::MutexLock lock(&mu_);
  auto slice = held_.find(index);
  if (fingerprint == fingerprint_ && slice != held_.end()) {
    if (auto it = slice->second.find(version); it != slice->second.end()) return it->second;
  }
  return absl::NotFoundError(absl::StrFormat("this server keeps no replica of slice %d at version %d of map %016x",
                                             index, version, fingerprint));
}

std::map<int, std::vector<uint64_t>> ReplicaStore::Held() const {
  absl::MutexLock lock(&mu_);
  std::map<int, std::vector<uint64_t>> out;
  for (const auto& [index, versions] : held_) {
    for (auto it = versions.rbegin(); it != versions.rend(); ++it) out[index].push_back(it->first);
  }
  return out;
}

void ReplicaStore::ExportMetrics(metrics::Registry& registry) {
  metrics::Gauge& kept =
      registry.AddGauge("omnilearn_replicas_kept_bytes", "bytes of other slices' replicas this server keeps").Add({});
  registry.AddCollectHook([this, &kept] { kept.Set(static_cast<double>(bytes())); });
}

uint64_t ReplicaStore::bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (const auto& [index, versions] : held_) {
    for (const auto& [version, kept] : versions) total += kept->size();
  }
  return total;
}

}  // namespace server
}  // namespace omnilearn
