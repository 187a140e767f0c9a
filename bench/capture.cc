// capture: what a checkpoint costs the pushes. The core captures a checkpoint under its
// lock, so every push waits for it; the capture shares the weights and the optimizer
// state instead of copying them, and the step after it writes the state into other
// buffers (copy on write, range by range inside the step).
// Baseline, in the same run: a copy of the optimizer state (what a capture cost when it
// copied), and a step no capture holds.
//   bazel run -c opt //bench:capture -- [--megabytes=100] [--reps=9]
#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "bench/bench_util.h"

ABSL_FLAG(std::string, megabytes, "25,100", "model sizes in MB");
ABSL_FLAG(int, reps, 9, "repetitions per figure (the median is reported)");

namespace omnilearn {
namespace bench {
namespace {

absl::StatusOr<nlohmann::json> Measure(double megabytes, int reps) {
  const ModelLayout layout = LayoutOfMegabytes(megabytes);
  server::ServerOptions o;
  o.mode = Mode::kAsync;
  o.controller.global_batch = 64;
  o.controller.policy = controller::Policy::kOff;
  o.optimizer.momentum = 0.9;  // SGD with a momentum buffer: one model-sized state
  auto core = server::ParameterServerCore::Create(o);
  if (!core.ok()) return core.status();
  server::JoinInfo info;
  info.name = "w0";
  info.layout = layout;
  info.initial_parameters = std::vector<float>(layout.total_elements(), 0.5f);
  absl::StatusOr<server::JoinResult> joined = (*core)->Join(info, absl::Now() + absl::Seconds(60));
  if (!joined.ok()) return joined.status();
  const std::vector<float> gradient(layout.total_elements(), 1e-3f);
  auto push = [&]() {
    server::PushInfo p;
    p.id = joined->id;
    p.batch = joined->batch;
    p.compute_seconds = 0.01;
    p.version = (*core)->version();
    if (!(*core)->Push(p, gradient, absl::Now() + absl::Seconds(60)).ok()) throw std::runtime_error("push");
  };
  push();  // the first step allocates the spare snapshot
  const double step_s = MedianSeconds(reps, push);
  const double capture_s = MedianSeconds(reps, [&]() { (void)*(*core)->Capture(); });
  const double step_held_s = MedianSeconds(reps, [&]() {
    const server::CheckpointState held = *(*core)->Capture();  // a checkpoint being written
    push();
  });
  const server::CheckpointState state = *(*core)->Capture();
  const double copy_s = MedianSeconds(reps, [&]() {
    for (const auto& [name, values] : state.optimizer_state) std::vector<float> copy(*values);
  });
  std::printf(
      "%5.0f MB | capture %8.3f ms | state copy %7.2f ms (%.0fx) | step %7.2f ms, with a capture held %7.2f ms "
      "(+%.2f ms)\n",
      megabytes, 1000 * capture_s, 1000 * copy_s, copy_s / capture_s, 1000 * step_s, 1000 * step_held_s,
      1000 * (step_held_s - step_s));
  std::fflush(stdout);
  return nlohmann::json{{"megabytes", megabytes},         {"capture_ms", 1000 * capture_s},
                        {"state_copy_ms", 1000 * copy_s}, {"copy_over_capture", copy_s / capture_s},
                        {"step_ms", 1000 * step_s},       {"step_with_capture_held_ms", 1000 * step_held_s}};
}

}  // namespace
}  // namespace bench
}  // namespace omnilearn

int main(int argc, char** argv) {
  using namespace omnilearn::bench;
  return BenchMain(argc, argv, "capture", []() -> absl::StatusOr<nlohmann::json> {
    std::printf(
        "capture: a checkpoint's capture under the core's lock (pushes wait for it) against a copy of the\n"
        "optimizer state (what it cost when it copied); the step while a capture is held writes the state\n"
        "into other buffers.\n");
    const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
    return RowsFor("megabytes", absl::GetFlag(FLAGS_megabytes), 0.001, [reps](double mb) { return Measure(mb, reps); });
  });
}
