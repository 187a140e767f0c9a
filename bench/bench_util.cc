#include "bench/bench_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/large_buffers.h"
#include "common/tensor_codec.h"

namespace omnilearn {
namespace bench {

double Median(std::vector<double> v) { return Percentile(std::move(v), 50); }

double MedianSeconds(int reps, const std::function<void()>& run) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(Seconds(start));
  }
  return Median(times);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank)), hi = static_cast<size_t>(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - lo);
}

namespace {

void Check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(absl::StrCat(what, ": ", strerror(errno)));
}

}  // namespace

double TcpSeconds(int64_t bytes, int reps) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  Check(listener >= 0, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Check(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "bind");
  socklen_t len = sizeof(addr);
  Check(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0, "getsockname");
  Check(listen(listener, 1) == 0, "listen");
  const int sender = socket(AF_INET, SOCK_STREAM, 0);
  Check(connect(sender, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
  const int receiver = accept(listener, nullptr, nullptr);
  Check(receiver >= 0, "accept");
  close(listener);
  constexpr size_t kBlock = 1 << 20;
  std::vector<char> out(kBlock, 1), in(kBlock);
  // One writer thread streams all repetitions; the reader times each one's bytes: the
  // stream's steady rate, with no thread start or connection set-up in any repetition.
  std::thread writer([&] {
    for (int64_t left = bytes * reps; left > 0;) {
      const ssize_t n = send(sender, out.data(), std::min<int64_t>(left, kBlock), 0);
      Check(n > 0, "send");
      left -= n;
    }
  });
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t left = bytes; left > 0;) {
      const ssize_t n = recv(receiver, in.data(), std::min<int64_t>(left, kBlock), 0);
      Check(n > 0, "recv");
      left -= n;
    }
    times.push_back(Seconds(start));
  }
  writer.join();
  close(sender);
  close(receiver);
  return Median(times);
}

ModelLayout LayoutOfMegabytes(double megabytes) {
  int64_t left = static_cast<int64_t>(megabytes * (1 << 20) / sizeof(float));
  std::vector<TensorSpec> specs;
  for (int i = 0; left > 0; ++i) {
    const int64_t n = std::min<int64_t>(left, int64_t{4} << 20);
    specs.push_back(TensorSpec{absl::StrCat("t", i), {n}});
    left -= n;
  }
  return *ModelLayout::Create(std::move(specs));
}

LocalServer::~LocalServer() {
  if (core) core->Shutdown();
  if (grpc_server) grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

std::unique_ptr<LocalServer> StartLocalServer(const server::ServerOptions& options) {
  auto s = std::make_unique<LocalServer>();
  absl::StatusOr<std::unique_ptr<server::ParameterServerCore>> core = server::ParameterServerCore::Create(options);
  if (!core.ok()) throw std::runtime_error(std::string(core.status().message()));
  s->core = std::move(*core);
  s->service = std::make_unique<server::ParameterServerService>(s->core.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &s->port);
  server::ConfigureServerBuilder(builder);
  builder.RegisterService(s->service.get());
  s->grpc_server = builder.BuildAndStart();
  if (!s->grpc_server || s->port == 0) throw std::runtime_error("cannot start the server");
  return s;
}

std::unique_ptr<worker::PsClient> ClientTo(int port) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per worker
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args);
  return worker::MakeGrpcPsClient(channel, worker::ClientOptions());
}

absl::StatusOr<worker::JoinReply> JoinAs(worker::PsClient& client, const std::string& name, const ModelLayout& layout,
                                         bool first, const std::vector<float>& weights) {
  worker::JoinRequest h;
  h.worker.name = name;
  h.has_initial_parameters = first;
  absl::StatusOr<worker::JoinReply> joined;
  // The first worker brings the model; the others are asked for one until it is in
  // (JoinResponse.send_model, or FAILED_PRECONDITION from a server of an earlier release).
  for (int attempt = 0; attempt < 5000; ++attempt) {
    joined = client.Join(h, layout, first ? absl::MakeConstSpan(weights) : absl::Span<const float>());
    const bool asked_for_model = (joined.ok() && joined->send_model) || absl::IsFailedPrecondition(joined.status());
    if (!asked_for_model) {
      if (joined.ok()) client.SetSessionSecret(joined->session_secret);
      return joined;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (joined.ok()) return absl::DeadlineExceededError(absl::StrCat(name, ": the first worker's model never came"));
  return joined;
}

worker::PushedStep StepOf(uint64_t worker_id, int64_t batch, uint64_t version, double compute_seconds) {
  worker::PushedStep p;
  p.worker_id = worker_id;
  p.model_version = version;
  p.step.batch_size = batch;
  p.step.end.compute_seconds = compute_seconds;
  return p;
}

absl::StatusOr<std::vector<double>> ParseNumbers(const std::string& flag, const std::string& csv, double min) {
  std::vector<double> out;
  for (absl::string_view part : absl::StrSplit(csv, ',')) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || !(v >= min)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", part, "' is not a number >= ", min));
    }
    out.push_back(v);
  }
  return out;
}

std::string ResultsDir() {
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const std::string dir = absl::StrCat(workspace ? workspace : ".", "/bench/results");
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string WriteResults(const std::string& name, const nlohmann::json& doc) {
  const std::string path = absl::StrCat(ResultsDir(), "/", name, ".json");
  std::ofstream(path) << doc.dump(2) << "\n";
  return path;
}

absl::StatusOr<nlohmann::json> RowsFor(const std::string& flag, const std::string& csv, double min,
                                       const std::function<absl::StatusOr<nlohmann::json>(double)>& row) {
  absl::StatusOr<std::vector<double>> numbers = ParseNumbers(flag, csv, min);
  if (!numbers.ok()) return numbers.status();
  nlohmann::json rows = nlohmann::json::array();
  for (double n : *numbers) {
    absl::StatusOr<nlohmann::json> r = row(n);
    if (!r.ok()) return r.status();
    rows.push_back(*std::move(r));
  }
  return rows;
}

int BenchMain(int argc, char** argv, const std::string& name,
              const std::function<absl::StatusOr<nlohmann::json>()>& measure) {
  KeepLargeBuffersInHeap();
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<nlohmann::json> rows = measure();
  if (!rows.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), std::string(rows.status().message()).c_str());
    return 2;
  }
  const std::string path =
      WriteResults(name, {{"benchmark", name}, {"machine", MachineDescription()}, {"rows", *rows}});
  std::printf("results: %s\n", path.c_str());
  for (const nlohmann::json& row : *rows) {
    if (row.value("errors", int64_t{0}) > 0) return 1;
  }
  return 0;
}

std::string MachineDescription() {
  utsname u{};
  uname(&u);
  return absl::StrCat(std::thread::hardware_concurrency(), " cores, ", u.machine, ", Linux ", u.release);
}

}  // namespace bench
}  // namespace omnilearn
