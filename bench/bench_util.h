// Helpers shared by the benchmarks: a stopwatch, medians and percentiles, a raw TCP
// stream over the loopback (the baseline the server is measured against), an in-process
// server on 127.0.0.1, and the JSON results under bench/results/.
#ifndef OMNILEARN_BENCH_BENCH_UTIL_H_
#define OMNILEARN_BENCH_BENCH_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/model_layout.h"
#include "nlohmann/json.hpp"
#include "server/control/parameter_server_core.h"
#include "server/rpc/service.h"
#include "worker/client/ps_client.h"

namespace omnilearn {
namespace bench {

inline double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double Median(std::vector<double> v);
double Percentile(std::vector<double> v, double p);  // p in [0, 100]
// The median of `reps` timings of `run`, in seconds.
double MedianSeconds(int reps, const std::function<void()>& run);

// Seconds to send `bytes` over one TCP connection on 127.0.0.1 (writer and reader
// threads, 1 MiB writes and reads), the median of `reps` back-to-back transfers on one
// stream.
double TcpSeconds(int64_t bytes, int reps);

// A model of about `megabytes` MB: tensors of at most 4M floats (16 MB), named t0, t1...
ModelLayout LayoutOfMegabytes(double megabytes);

// A parameter server (core + gRPC service) on 127.0.0.1, an ephemeral port.
struct LocalServer {
  std::unique_ptr<server::ParameterServerCore> core;
  std::unique_ptr<server::ParameterServerService> service;
  std::unique_ptr<grpc::Server> grpc_server;
  int port = 0;
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  ~LocalServer();
};
std::unique_ptr<LocalServer> StartLocalServer(const server::ServerOptions& options);

// A worker's client with its own connection to 127.0.0.1:port (as separate processes
// would have), the daemon's message limits.
std::unique_ptr<worker::PsClient> ClientTo(int port);
// Joins `name` with `layout` (the first worker brings `weights`); retries while the
// server has no model yet.
absl::StatusOr<worker::JoinReply> JoinAs(worker::PsClient& client, const std::string& name, const ModelLayout& layout,
                                         bool first, const std::vector<float>& weights);
// A push of `batch` samples by session `worker_id` on model `version`.
worker::PushedStep StepOf(uint64_t worker_id, int64_t batch, uint64_t version, double compute_seconds);

// "1,16,100" -> {1, 16, 100}; InvalidArgument naming `flag` for a value that is not a
// number >= `min`.
absl::StatusOr<std::vector<double>> ParseNumbers(const std::string& flag, const std::string& csv, double min);
// One row per number of `csv` (ParseNumbers), in order: `row(number)`. The first error
// (a bad number, a failed row) is returned.
absl::StatusOr<nlohmann::json> RowsFor(const std::string& flag, const std::string& csv, double min,
                                       const std::function<absl::StatusOr<nlohmann::json>(double)>& row);

// Writes `doc` to bench/results/<name>.json (in the workspace under `bazel run`) and
// returns the path.
std::string WriteResults(const std::string& name, const nlohmann::json& doc);
// A benchmark's main: keeps large buffers in the heap (as the server and the worker do),
// parses the flags, runs `measure` for its rows, writes {"benchmark": name, "machine",
// "rows"} (WriteResults) and says where. Exit status: 2 when `measure` fails (bad flags),
// 1 when a row counts "errors", else 0.
int BenchMain(int argc, char** argv, const std::string& name,
              const std::function<absl::StatusOr<nlohmann::json>()>& measure);
// The folder results go to.
std::string ResultsDir();
// "2-core x86_64, Debian 12" style description of this machine.
std::string MachineDescription();

}  // namespace bench
}  // namespace omnilearn

#endif  // OMNILEARN_BENCH_BENCH_UTIL_H_
