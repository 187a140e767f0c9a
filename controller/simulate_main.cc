// Shows what a controller policy does on a simulated cluster, one line per adjustment.
//   bazel run //controller:simulate -- --speeds=1,1,2,4 --noise=0.05 --policy=omnilearn
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/flag_checks.h"
#include "controller/controller_flags.h"
#include "controller/simulation.h"

ABSL_FLAG(std::string, speeds, "1,1,2,4", "relative worker speeds, comma-separated");
ABSL_FLAG(double, noise, 0.05, "relative standard deviation of each measured compute time");
ABSL_FLAG(double, overhead_ms, 0, "fixed per-iteration cost of every worker, milliseconds");
ABSL_FLAG(int, rounds, 10, "adjustments to run");
ABSL_FLAG(std::string, link_ms, "", "per worker, link milliseconds per iteration (e.g. 0,0,0,8; default none)");
ABSL_FLAG(std::string, schedule, "", "speed changes, round:worker:speed,... (worker from 0)");
ABSL_FLAG(std::string, oom_batches, "", "per worker, batches above this run out of memory (0 = none)");
ABSL_FLAG(double, samples_per_second, 1000, "throughput of a speed-1 worker");
ABSL_FLAG(uint64_t, seed, 1, "random seed of the noise");
ABSL_FLAG(double, first_step_factor, 1, "each worker's first step takes this many times its time (a compile step)");
ABSL_FLAG(std::string, load_probability, "",
          "per worker, the probability that its host slows a step --load_factor times (a server beside it)");
ABSL_FLAG(double, load_factor, 3, "how much a loaded host slows a step");
ABSL_FLAG(bool, load_overruns, true, "a step its host slowed says its emulated device overran");

namespace omnilearn {
namespace controller {
namespace {

// A list flag of numbers >= 0 ("" = none).
absl::StatusOr<std::vector<double>> OptionalList(const std::string& text) {
  if (text.empty()) return std::vector<double>{};
  return ParseSpeeds(text, /*allow_zero=*/true);
}

absl::StatusOr<std::vector<int64_t>> OomBatches() {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_oom_batches), ',', absl::SkipWhitespace())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("bad --oom_batches entry '", part, "'"));
    }
    out.push_back(v);
  }
  return out;
}

// The simulation the flags describe.
absl::StatusOr<SimulationOptions> OptionsFromFlags() {
  auto speeds = ParseSpeeds(absl::GetFlag(FLAGS_speeds));
  auto schedule = ParseSchedule(absl::GetFlag(FLAGS_schedule));
  auto controller = ControllerFromFlags();
  auto links = OptionalList(absl::GetFlag(FLAGS_link_ms));
  auto load = OptionalList(absl::GetFlag(FLAGS_load_probability));
  auto oom = OomBatches();
  for (const absl::Status& s :
       {speeds.status(), schedule.status(), controller.status(), links.status(), load.status(), oom.status()}) {
    if (!s.ok()) return s;
  }
  SimulationOptions o;
  o.speeds = *speeds;
  o.schedule = *schedule;
  o.oom_batches = *oom;
  o.noise = absl::GetFlag(FLAGS_noise);
  o.overhead_seconds = absl::GetFlag(FLAGS_overhead_ms) / 1000.0;
  o.rounds = absl::GetFlag(FLAGS_rounds);
  o.iterations_per_adjustment = controller->adjust_every;
  o.samples_per_second = absl::GetFlag(FLAGS_samples_per_second);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.first_step_factor = absl::GetFlag(FLAGS_first_step_factor);
  o.load_probability = *load;
  o.load_factor = absl::GetFlag(FLAGS_load_factor);
  o.load_overruns = absl::GetFlag(FLAGS_load_overruns);
  o.controller = controller->options;
  for (double ms : *links) o.link_seconds.push_back(ms / 1000);
  return o;
}

void Print(const SimulationOptions& o, const std::vector<SimulationRound>& rounds) {
  std::printf("controller=%s workers=%zu global_batch=%ld noise=%.3f overhead_ms=%.1f adjust_every=%d\n",
              PolicyName(o.controller.policy).c_str(), o.speeds.size(), o.controller.global_batch, o.noise,
              absl::GetFlag(FLAGS_overhead_ms), o.iterations_per_adjustment);
  std::printf("spread = max(t)/min(t) of the round's measured mean compute times; ideal = without noise%s\n",
              o.link_seconds.empty() ? "" : "; iteration = ideal compute + link");
  for (const SimulationRound& r : rounds) {
    std::printf("adj %3d |", r.round);
    for (size_t k = 0; k < r.batches.size(); ++k) {
      std::printf(" w%zu b=%4ld t=%7.2fms |", k, r.batches[k], 1000 * r.measured_seconds[k]);
    }
    std::printf(" spread %.3f ideal %.3f", r.measured_spread, r.true_spread);
    if (!o.link_seconds.empty()) std::printf(" iteration %.3f", r.true_iteration_spread);
    std::printf("\n");
  }
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "simulate: %s\n", std::string(s.message()).c_str());
  return 2;
}

int Run() {
  absl::StatusOr<SimulationOptions> o = OptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  absl::StatusOr<std::vector<SimulationRound>> rounds = Simulate(*o);
  if (!rounds.ok()) return Fail(rounds.status());
  Print(*o, *rounds);
  return 0;
}

}  // namespace
}  // namespace controller
}  // namespace omnilearn

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Runs a batch-controller policy against simulated heterogeneous workers.");
  omnilearn::ShowOwnFlagsInHelp({"controller/simulate_main.cc", "controller/controller_flags.cc"});
  omnilearn::RefuseUnknownFlags(argc, argv);  // with the nearest flag as a suggestion
  absl::ParseCommandLine(argc, argv);
  return omnilearn::controller::Run();
}
