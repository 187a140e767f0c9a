// The replicas of other servers' slices that this server keeps in memory
// (ServerPeers.KeepReplica, docs/SHARDING.md): each is a slice's checkpoint file, as its
// server wrote it, so that a replacement for a server lost for good, disk and all, takes
// the slice from here (ServerPeers.FetchReplica) and the job goes on from that version.
#ifndef OMNILEARN_SERVER_CHECKPOINT_REPLICA_STORE_H_
#define OMNILEARN_SERVER_CHECKPOINT_REPLICA_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"

namespace omnilearn {
namespace server {

// The most bytes one replica may claim: a slice's weights and optimizer state, with room.
inline constexpr uint64_t kMaxReplicaBytes = uint64_t{16} << 30;

// Thread-safe.
class ReplicaStore {
 public:
  // keep >= 1: the newest `keep` replicas of each slice are kept.
  explicit ReplicaStore(int keep) : keep_(keep) {}

  // Keeps `bytes` as slice `index`'s replica of `version` of the job's map `fingerprint`,
  // once they read back as that slice's checkpoint of that version. A replica of another
  // map drops those of the map kept until then (the servers run a new job).
  // InvalidArgument (or DataLoss) for bytes that are not that checkpoint.
  absl::Status Keep(int index, uint64_t version, uint64_t fingerprint, std::string bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // The replica of slice `index` at `version` of map `fingerprint`; NotFound when none is kept.
  absl::StatusOr<std::shared_ptr<const std::string>> Get(int index, uint64_t version, uint64_t fingerprint) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The versions kept, newest first, by slice.
  std::map<int, std::vector<uint64_t>> Held() const ABSL_LOCKS_EXCLUDED(mu_);
  // The bytes every replica kept takes.
  uint64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  // A gauge of bytes() in `registry`, read at each scrape (this outlives the registry's use).
  void ExportMetrics(metrics::Registry& registry);

 private:
  const int keep_;
  mutable absl::Mutex mu_;
  uint64_t fingerprint_ ABSL_GUARDED_BY(mu_) = 0;
  // slice -> version -> the file's bytes
  std::map<int, std::map<uint64_t, std::shared_ptr<const std::string>>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CHECKPOINT_REPLICA_STORE_H_
