// Takes a server's checkpoints on a timer read from the core's clock. The state is
// captured under the core's lock (no copy of the weights, one of the optimizer state);
// the file is written outside it, so pushes are not stalled by the disk.
#ifndef OMNILEARN_SERVER_CHECKPOINTER_H_
#define OMNILEARN_SERVER_CHECKPOINTER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/checkpoint.h"
#include "server/parameter_server_core.h"

namespace omnilearn {
namespace server {

// Thread-compatible: one thread (the server's monitor, then its shutdown) calls it.
class Checkpointer {
 public:
  // `core` must outlive this. `every` > 0.
  Checkpointer(ParameterServerCore* core, CheckpointDir dir, absl::Duration every);

  // Writes a checkpoint when `every` has passed since the last one (or since
  // construction) and the model has moved since. Returns the path written, or "" when
  // none was due. Errors from writing (the previous checkpoints stay as they were).
  absl::StatusOr<std::string> MaybeCheckpoint();
  // Writes one now unless the model is at the version last written ("" then). The first
  // checkpoint of a new job on the same daemon (--reset_when_done) moves the previous
  // job's checkpoints aside first, so they neither shadow nor replace the new ones.
  absl::StatusOr<std::string> CheckpointNow();

  uint64_t last_version() const { return last_version_; }

 private:
  ParameterServerCore* const core_;
  const CheckpointDir dir_;
  const absl::Duration every_;
  absl::Time last_;
  uint64_t last_version_;
  uint64_t last_job_ = 1;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CHECKPOINTER_H_
