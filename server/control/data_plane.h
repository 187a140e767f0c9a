// What the server's gRPC edge needs of a data plane (docs/SHARDING.md): the calls that
// carry a slice of the model (pushes and pulls) and their bookkeeping. The coordinator's
// core (parameter_server_core.h) is one, holding slice 0 and the control plane; a shard
// server's ShardCore (shard_core.h) is the other, holding one slice.
#ifndef OMNILEARN_SERVER_CONTROL_DATA_PLANE_H_
#define OMNILEARN_SERVER_CONTROL_DATA_PLANE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/model_layout.h"
#include "server/control/epoch_sampler.h"
#include "server/control/push_check.h"
#include "server/data/buffer_pool.h"

namespace omnilearn {
namespace server {

// What the worker must do next (mirrors the proto's Action).
enum class Action { kContinue, kRejoin, kStop };

struct PushResult {
  Action action = Action::kContinue;
  int64_t next_batch = 0;
  uint64_t version = 0;
  uint64_t staleness = 0;
  bool applied = false;
  std::string message;
  uint64_t global_samples = 0;  // samples trained on by all workers (defines the epoch)
  SampleBatch samples;          // the next mini-batch's samples (with dataset_size)
  // The job's samples are all handed out and none is this worker's: it trains nothing and
  // sends idle pushes (PushInfo::idle) until the job's count is reached or samples of a
  // lost worker come back to it.
  bool idle = false;
  // Seconds the push waited after it arrived whole for the other members' pushes of its
  // round (the core measures it: a sync round's wait, a shard's wait for its step's slices).
  double held_seconds = 0;
};

struct ModelSnapshot {
  uint64_t version = 0;
  uint64_t history = 0;  // the steps that brought the model to `version` (ParameterStore::history)
  ModelLayout layout;
  std::shared_ptr<const std::vector<float>> weights;  // null when up to date
};

// Thread-safe in every implementation.
class DataPlane {
 public:
  virtual ~DataPlane() = default;

  // PermissionDenied when the worker's session exists and `secret` is not its own.
  virtual absl::Status Authenticate(WorkerId id, absl::string_view secret) const = 0;
  // Takes one gradient of this plane's slice (empty for a report or an OOM report).
  virtual absl::StatusOr<PushResult> Push(const PushInfo& info, std::vector<float> gradient, absl::Time deadline) = 0;
  // The slice, or only its version when the worker has it already; a shard first waits
  // (until `deadline`) for `min_version`, the version the coordinator answered.
  virtual absl::StatusOr<ModelSnapshot> Pull(WorkerId id, uint64_t have_version, uint64_t min_version,
                                             absl::Time deadline) = 0;
  // The slice's layout; FailedPrecondition while there is none.
  virtual absl::StatusOr<ModelLayout> Layout() const = 0;
  // Buffers for assembling pushes (thread-safe); Push returns its gradient's buffer here.
  virtual BufferPool& buffers() = 0;
  virtual const Clock& clock() const = 0;
  virtual void Log(const std::string& line) const = 0;
  // Counters of what the edge saw.
  virtual void CountRejectedPush(WorkerId id, const std::string& result) = 0;
  virtual void CountUnauthenticated() = 0;
  virtual void CountPushBytes(int64_t bytes) = 0;
  virtual void CountPullBytes(int64_t bytes) = 0;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_DATA_PLANE_H_
