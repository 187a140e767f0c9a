// transfer: push and pull of a model of S MB through the server (one worker, the real
// gRPC client and service on 127.0.0.1, async mode: a push is applied on arrival)
// against one raw TCP stream of the same bytes over the same loopback, in the same run.
//   bazel run -c opt //bench:transfer -- [--sizes=1,16,100,256] [--seconds=4]
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/tensor_codec.h"
#include "worker/client/ps_client.h"

ABSL_FLAG(std::string, sizes, "1,16,100,256", "model sizes in MB");
ABSL_FLAG(double, seconds, 4, "time per measurement (at least 3 repetitions each)");

namespace omnilearn {
namespace bench {
namespace {

int Reps(double megabytes, double seconds) {
  // ~1 GB/s as a first guess: enough repetitions for a stable median, bounded in time.
  return std::max(3, std::min(50, static_cast<int>(seconds * 1000 / std::max(1.0, megabytes))));
}

nlohmann::json Measure(double megabytes) {
  const ModelLayout layout = LayoutOfMegabytes(megabytes);
  const int64_t bytes = layout.total_elements() * sizeof(float);
  const int reps = Reps(megabytes, absl::GetFlag(FLAGS_seconds));
  const double tcp = TcpSeconds(bytes, reps);

  server::ServerOptions o;
  o.mode = server::Mode::kAsync;
  o.controller.global_batch = 32;
  o.optimizer.momentum = 0;
  std::unique_ptr<LocalServer> s = StartLocalServer(o);
  worker::ClientOptions co;
  auto client = *worker::MakeGrpcPsClient(s->address(), co);
  std::vector<float> weights(layout.total_elements(), 0.5f), gradient(layout.total_elements(), 1e-6f);
  worker::JoinRequest join;
  join.worker.name = "bench";
  join.has_initial_parameters = true;
  auto joined = client->Join(join, layout, absl::MakeSpan(weights));
  if (!joined.ok()) throw std::runtime_error(joined.status().ToString());
  client->SetSessionSecret(joined->session_secret);

  std::vector<double> pull, push;
  uint64_t version = 0;
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    auto v = client->Pull(joined->worker_id, ~0ull, layout, absl::MakeSpan(weights));  // the whole model every time
    pull.push_back(Seconds(start));
    if (!v.ok()) throw std::runtime_error(v.status().ToString());
    version = *v;
    // Alone: always the whole global batch.
    const worker::PushedStep ph = StepOf(joined->worker_id, joined->batch_size, version, 0.01);
    start = std::chrono::steady_clock::now();
    auto reply = client->Push(ph, layout, gradient);
    push.push_back(Seconds(start));
    if (!reply.ok()) throw std::runtime_error(reply.status().ToString());
  }
  const double gb = bytes / 1e9;
  const double tcp_gbps = gb / tcp, pull_gbps = gb / Median(pull), push_gbps = gb / Median(push);
  std::printf("%8.0f MB | TCP %6.2f GB/s | pull %6.2f GB/s  %.2fx | push %6.2f GB/s  %.2fx | %d reps\n", megabytes,
              tcp_gbps, pull_gbps, pull_gbps / tcp_gbps, push_gbps, push_gbps / tcp_gbps, reps);
  std::fflush(stdout);
  return {{"megabytes", megabytes},
          {"bytes", bytes},
          {"repetitions", reps},
          {"tcp_gbps", tcp_gbps},
          {"pull_gbps", pull_gbps},
          {"push_gbps", push_gbps},
          {"pull_ratio", pull_gbps / tcp_gbps},
          {"push_ratio", push_gbps / tcp_gbps},
          {"pull_seconds_median", Median(pull)},
          {"push_seconds_median", Median(push)}};
}

}  // namespace
}  // namespace bench
}  // namespace omnilearn

int main(int argc, char** argv) {
  using namespace omnilearn::bench;
  return BenchMain(argc, argv, "transfer", []() -> absl::StatusOr<nlohmann::json> {
    std::printf(
        "transfer: one worker pulls and pushes the whole model through the server (async: a push is\n"
        "applied on arrival); the baseline is one raw TCP stream of the same bytes on 127.0.0.1.\n");
    return RowsFor("sizes", absl::GetFlag(FLAGS_sizes), 0.001,
                   [](double mb) -> absl::StatusOr<nlohmann::json> { return Measure(mb); });
  });
}
