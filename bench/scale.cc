// scale: 1 to 64 workers (threads, each with its own connection), a 1 MB model, zero
// compute, sync and async, each worker calling PushPull in a loop for --seconds: rounds
// (sync) or pushes (async) per second, and the p50/p99 latency of a push. Errors are
// counted (there must be none). bench/plot_scale.py draws the curve.
//   bazel run -c opt //bench:scale -- [--workers=1,2,4,8,16,32,64] [--seconds=3]
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"

ABSL_FLAG(std::string, workers, "1,2,4,8,16,32,64", "worker counts");
ABSL_FLAG(double, megabytes, 1, "model size in MB");
ABSL_FLAG(double, seconds, 3, "seconds per point");

namespace omnilearn {
namespace bench {
namespace {

// What the workers of one measurement share.
struct Measurement {
  ModelLayout layout;
  int port = 0;
  std::mutex mu;
  std::vector<double> latencies;  // of the calls made while `measuring`, under mu
  std::atomic<int64_t> pushes{0}, errors{0};
  std::atomic<bool> measuring{false}, stop{false};
};

// Worker `w`: joins (the first brings the model), then pushes and pulls until `stop`,
// timing each call made while `measuring`.
void RunWorker(Measurement& m, int w) {
  auto client = ClientTo(m.port);
  std::vector<float> weights(m.layout.total_elements(), 0.5f), gradient(m.layout.total_elements(), 1e-6f);
  absl::StatusOr<worker::JoinReply> joined = JoinAs(*client, "w" + std::to_string(w), m.layout, w == 0, weights);
  if (!joined.ok()) return (void)++m.errors;
  auto v = client->Pull(joined->worker_id, ~0ull, m.layout, absl::MakeSpan(weights));
  if (!v.ok()) return (void)++m.errors;
  uint64_t version = *v;
  std::vector<double> mine;
  int64_t batch = joined->batch_size;  // the batch the server last told this worker
  while (!m.stop.load()) {
    const worker::PushedStep ph = StepOf(joined->worker_id, batch, version, 0.001);
    const auto start = std::chrono::steady_clock::now();
    auto r = client->PushPull(ph, m.layout, gradient, &version, absl::MakeSpan(weights));
    if (!r.ok()) {
      ++m.errors;
      return;
    }
    if (r->next_batch_size > 0) batch = r->next_batch_size;
    if (m.measuring.load()) {
      mine.push_back(Seconds(start));
      ++m.pushes;
    }
  }
  std::lock_guard<std::mutex> lock(m.mu);
  m.latencies.insert(m.latencies.end(), mine.begin(), mine.end());
}

// The measurement's line and its JSON row.
nlohmann::json Report(server::Mode mode, int workers, double rate, Measurement& m) {
  const double p50 = Percentile(m.latencies, 50), p99 = Percentile(m.latencies, 99);
  const char* name = mode == server::Mode::kSync ? "sync" : "async";
  const char* unit = mode == server::Mode::kSync ? "rounds" : "pushes";
  std::printf("%-5s %3d workers | %8.1f %s/s | push p50 %7.2f ms  p99 %7.2f ms | errors %ld\n", name, workers, rate,
              unit, 1000 * p50, 1000 * p99, m.errors.load());
  std::fflush(stdout);
  return {{"mode", name},
          {"workers", workers},
          {"rate_per_second", rate},
          {"unit", unit},
          {"push_p50_ms", 1000 * p50},
          {"push_p99_ms", 1000 * p99},
          {"pushes", m.pushes.load()},
          {"errors", m.errors.load()}};
}

nlohmann::json Measure(server::Mode mode, int workers, double megabytes, double seconds) {
  server::ServerOptions o;
  o.mode = mode;
  o.num_workers = workers;
  o.controller.global_batch = 32 * workers;
  o.controller.policy = controller::Policy::kOff;
  o.optimizer.momentum = 0;
  o.round_timeout = absl::Seconds(50);
  std::unique_ptr<LocalServer> s = StartLocalServer(o);
  Measurement m;
  m.layout = LayoutOfMegabytes(megabytes);
  m.port = s->port;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) threads.emplace_back([&m, w] { RunWorker(m, w); });
  // Warm up (joins, the first rounds), then measure.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const uint64_t v0 = s->core->version();
  m.measuring.store(true);
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  m.measuring.store(false);
  const double elapsed = Seconds(start);
  const uint64_t v1 = s->core->version();
  m.stop.store(true);
  s->core->Shutdown();  // wakes workers waiting in a round; their calls end
  for (auto& t : threads) t.join();
  const double rate = (mode == server::Mode::kSync ? static_cast<double>(v1 - v0) : m.pushes.load()) / elapsed;
  return Report(mode, workers, rate, m);
}

}  // namespace
}  // namespace bench
}  // namespace omnilearn

int main(int argc, char** argv) {
  using namespace omnilearn::bench;
  return BenchMain(argc, argv, "scale", []() -> absl::StatusOr<nlohmann::json> {
    std::printf("scale: N workers, %.0f MB model, zero compute, PushPull in a loop; sync and async.\n",
                absl::GetFlag(FLAGS_megabytes));
    auto counts = ParseNumbers("workers", absl::GetFlag(FLAGS_workers), 1);
    if (!counts.ok()) return counts.status();
    nlohmann::json rows = nlohmann::json::array();
    for (omnilearn::Mode mode : {omnilearn::Mode::kSync, omnilearn::Mode::kAsync}) {
      for (double n : *counts) {
        rows.push_back(
            Measure(mode, static_cast<int>(n), absl::GetFlag(FLAGS_megabytes), absl::GetFlag(FLAGS_seconds)));
      }
    }
    return rows;
  });
}
