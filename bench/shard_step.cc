// shard_step: a shard server's sync step once the coordinator's command comes, for a
// slice of M MB and W members, with the members' slices summed as they arrived
// (server/data/arrival_sum.h: the step only applies) against summed at the command (the
// members' weights are not their pushes' batches, so the step sums them itself, as every
// step did before), measured in the same run, interleaved. A quarter of ResNet-18 is
// 11.7 MB, of the 40 MB MLP 10 MB.
//   bazel run -c opt //bench:shard_step -- [--megabytes=12,48] [--workers=4] [--reps=15]
#include <cstdio>

#include "absl/flags/flag.h"
#include "bench/bench_util.h"
#include "server/data/shard_core.h"

ABSL_FLAG(std::string, megabytes, "12,48", "slice sizes in MB");
ABSL_FLAG(int, workers, 4, "members of each step");
ABSL_FLAG(int, reps, 15, "steps per case (the median is reported)");

namespace omnilearn {
namespace bench {
namespace {

constexpr int64_t kBatch = 8;

// One step of `shard` at its version: every member pushes its slice (summed on arrival
// when the shard does), then the command comes, with weights equal to the batches
// (`on_arrival`) or not. Seconds from the command to the slice stepped.
absl::StatusOr<double> TimedStep(server::ShardCore& shard, int workers, const std::vector<float>& slice,
                                 bool on_arrival) {
  const uint64_t version = shard.version();
  server::ReplicatedStep step;
  step.version = version;
  step.settings.learning_rate = 1e-6;
  for (int w = 1; w <= workers; ++w) {
    server::PushInfo info;
    info.id = w;
    info.batch = kBatch;
    info.version = version;
    absl::StatusOr<server::PushResult> r = shard.Push(info, slice, absl::InfinitePast());  // held until the step
    if (!r.ok()) return r.status();
    step.members.push_back({static_cast<WorkerId>(w), version, on_arrival ? kBatch : kBatch + 1.0});
  }
  step.settings.update_scale = 1.0 / (workers * kBatch);
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = shard.Step(step); !s.ok()) return s;
  return Seconds(start);
}

absl::StatusOr<nlohmann::json> Measure(double megabytes, int workers, int reps) {
  const ModelLayout layout = LayoutOfMegabytes(megabytes);
  const int64_t n = layout.total_elements();
  server::ShardCore shard({});
  if (absl::Status s =
          shard.Init(layout, std::vector<float>(n, 0.5f), 0, server::OptimizerOptions{}, absl::Seconds(30));
      !s.ok()) {
    return s;
  }
  for (int w = 1; w <= workers; ++w) shard.OpenSession(w, "s");
  const std::vector<float> slice(n, 0.25f);
  std::vector<double> at_command, on_arrival;
  for (int i = 0; i < reps; ++i) {  // interleaved: the machine's drift falls on both
    for (bool arrival : {false, true}) {
      absl::StatusOr<double> t = TimedStep(shard, workers, slice, arrival);
      if (!t.ok()) return t.status();
      (arrival ? on_arrival : at_command).push_back(*t);
    }
  }
  const double command_ms = 1e3 * Median(at_command), arrival_ms = 1e3 * Median(on_arrival);
  const double slice_mb = 4.0 * static_cast<double>(n) / 1e6;
  std::printf("%8.1f MB  %2d members  summed at the command %8.2f ms  on arrival %8.2f ms  ratio %.2f\n", slice_mb,
              workers, command_ms, arrival_ms, arrival_ms / command_ms);
  return nlohmann::json{{"megabytes", slice_mb},
                        {"members", workers},
                        {"summed_at_command_ms", command_ms},
                        {"summed_on_arrival_ms", arrival_ms},
                        {"ratio", arrival_ms / command_ms}};
}

}  // namespace
}  // namespace bench
}  // namespace omnilearn

int main(int argc, char** argv) {
  using namespace omnilearn::bench;  // NOLINT
  return BenchMain(argc, argv, "shard_step", []() -> absl::StatusOr<nlohmann::json> {
    std::printf(
        "shard_step: a shard's sync step from the coordinator's command to the slice stepped, the members'\n"
        "slices summed as they arrived against summed at the command (the baseline), same run.\n");
    return RowsFor("megabytes", absl::GetFlag(FLAGS_megabytes), 0.001, [](double mb) -> absl::StatusOr<nlohmann::json> {
      return Measure(mb, absl::GetFlag(FLAGS_workers), absl::GetFlag(FLAGS_reps));
    });
  });
}
