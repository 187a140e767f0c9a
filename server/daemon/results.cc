#include "server/daemon/results.h"

#include <cstdio>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/grpc_security.h"
#include "common/shard_map.h"
#include "server/checkpoint/checkpoint.h"
#include "server/daemon/resume.h"
#include "server/daemon/summary.h"
#include "server/rpc/shard_link.h"

namespace omnilearn {
namespace server {
namespace {

// The whole model of a sharded job: slice 0 from the coordinator's capture, every other
// slice pulled from its shard at the same version (under a session of the coordinator's)
// and, in sync, with slice 0's step history: one model, or none.
absl::StatusOr<std::vector<float>> AssembleModel(CoordinatorShards* shards, const CheckpointState& slice0,
                                                 const PeerAccess& peers) {
  const std::optional<ShardMap> map = shards->map();
  const std::optional<ModelLayout> layout = shards->job_layout();
  if (!map.has_value() || !layout.has_value()) return absl::FailedPreconditionError("the job has no model yet");
  std::vector<float> whole(layout->total_elements());
  map->Scatter(0, *slice0.weights, absl::MakeSpan(whole));
  constexpr WorkerId kExportSession = ~WorkerId{0};
  const std::string secret = NewSessionSecret();
  const uint64_t history = slice0.mode == "sync" ? slice0.history : 0;  // async slices may differ by design
  shards->Hooks().session_opened(kExportSession, secret);
  for (const CoordinatorShards::ShardInfo& shard : shards->Shards()) {
    absl::StatusOr<std::vector<float>> slice;
    for (int attempt = 0; attempt < 50; ++attempt) {  // until the shard has the session (its stream's order)
      slice = PullSlice(shard.address, peers.credentials, peers.token, kExportSession, secret,
                        map->slice_layout(shard.index), slice0.version, history, absl::Seconds(60));
      if (!absl::IsNotFound(slice.status())) break;
      absl::SleepFor(absl::Milliseconds(200));
    }
    if (!slice.ok()) return slice.status();
    map->Scatter(shard.index, *slice, absl::MakeSpan(whole));
  }
  shards->Hooks().session_closed(kExportSession);
  if (history != 0) {
    std::printf("omnilearn_server: every slice's step history at version %lu is slice 0's (%016lx)\n", slice0.version,
                history);
  }
  return whole;
}

// --export: the trained model's weights, the whole of it in a sharded job.
absl::Status Export(const DaemonFlags& f, ParameterServerCore* core, CoordinatorShards* shards,
                    const PeerAccess& peers) {
  absl::StatusOr<CheckpointState> state = core->Capture();
  if (!state.ok()) return state.status();
  absl::Status s;
  if (shards == nullptr) {
    s = ExportModel(f.export_path, state->layout, *state->weights, state->version);
  } else {
    absl::StatusOr<std::vector<float>> whole = AssembleModel(shards, *state, peers);
    s = whole.ok() ? ExportModel(f.export_path, *shards->job_layout(), *whole, state->version) : whole.status();
  }
  if (s.ok()) {
    std::printf("omnilearn_server: exported the model (version %lu) to %s\n", state->version, f.export_path.c_str());
  }
  return s;
}

}  // namespace

int WriteResults(const DaemonFlags& f, ParameterServerCore* core, Checkpointer* checkpointer, CoordinatorShards* shards,
                 const PeerAccess& peers, absl::Time start) {
  int rc = 0;
  if (checkpointer != nullptr && !ReportCheckpoint(checkpointer->CheckpointNow())) rc = 1;
  if (!f.export_path.empty()) {
    if (absl::Status s = Export(f, core, shards, peers); !s.ok()) {
      std::fprintf(stderr, "omnilearn_server: export to %s failed: %s\n", f.export_path.c_str(),
                   std::string(s.message()).c_str());
      rc = 1;
    }
  }
  const ServerSnapshot s = core->Snapshot();
  const std::string path = f.summary_json;
  if (!path.empty()) {
    const std::string json = SummaryJson(s, absl::ToDoubleSeconds(absl::Now() - start));
    absl::Status written = WriteFileAtomically(path, [&](const ByteSink& write) {
      return write(json.data(), json.size()) ? absl::OkStatus() : absl::DataLossError("short write");
    });
    if (!written.ok()) {
      std::fprintf(stderr, "omnilearn_server: cannot write --summary_json=%s: %s\n", path.c_str(),
                   std::string(written.message()).c_str());
      return 1;
    }
  }
  std::printf("final: %s\n", AdjustmentLine(s).c_str());
  return rc;
}

}  // namespace server
}  // namespace omnilearn
