// round: W workers (threads, each with its own connection) in sync mode, zero compute,
// models of 1 MB and 100 MB: the time of a round (push + the new model) with two calls
// per iteration (Push, then Pull) and with one (PushPull), against the pure transfer
// time of the bytes moved (at the TCP rate measured in the same run); and the same over
// a relay that delays each direction by --latency_ms (this kernel has no netem). The
// overhead is PushPull's round time less the pure transfer and one round trip.
//   bazel run -c opt //bench:round -- [--sizes=1,100] [--workers=4] [--latency_ms=20] [--trials=3]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/tensor_codec.h"
#include "worker/client/ps_client.h"

ABSL_FLAG(std::string, sizes, "1,100", "model sizes in MB");
ABSL_FLAG(int, workers, 4, "workers");
ABSL_FLAG(double, latency_ms, 20, "one-way latency of the relay case (0 = no relay case)");
ABSL_FLAG(double, seconds, 3, "time per measurement (at least 5 rounds)");
ABSL_FLAG(int, trials, 3,
          "trials of each case, each with its own TCP baseline taken just before; the median trial (by "
          "overhead) is reported");

namespace omnilearn {
namespace bench {
namespace {

// Forwards TCP connections from its own port to `upstream`, delaying every byte by
// `delay` in each direction.
class DelayRelay {
 public:
  DelayRelay(int upstream, std::chrono::microseconds delay) : upstream_(upstream), delay_(delay) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = Loopback(0);
    bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    listen(listener_, 64);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~DelayRelay() {
    stop_.store(true);
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    acceptor_.join();
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
    for (auto& t : threads_) t.join();
    for (int fd : fds_) close(fd);
  }
  int port() const { return port_; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    return a;
  }
  void Accept() {
    while (!stop_.load()) {
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int server = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a = Loopback(upstream_);
      if (connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        close(client);
        close(server);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      Pipe(client, server);
      Pipe(server, client);
    }
  }
  // from -> to: a reader stamps each piece with its due time, a writer sends it then.
  void Pipe(int from, int to) {
    struct Queue {
      std::mutex mu;
      std::condition_variable cv;
      std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> pieces;
      bool closed = false;
    };
    auto q = std::make_shared<Queue>();
    threads_.emplace_back([this, from, q] {
      std::vector<char> buf(1 << 20);
      while (true) {
        const ssize_t n = recv(from, buf.data(), buf.size(), 0);
        std::lock_guard<std::mutex> lock(q->mu);
        if (n <= 0) {
          q->closed = true;
          q->cv.notify_all();
          return;
        }
        q->pieces.emplace_back(std::chrono::steady_clock::now() + delay_, std::string(buf.data(), n));
        q->cv.notify_all();
      }
    });
    threads_.emplace_back([to, q] {
      while (true) {
        std::unique_lock<std::mutex> lock(q->mu);
        q->cv.wait(lock, [&] { return q->closed || !q->pieces.empty(); });
        if (q->pieces.empty()) {
          shutdown(to, SHUT_WR);
          return;
        }
        auto [due, data] = std::move(q->pieces.front());
        q->pieces.pop_front();
        lock.unlock();
        std::this_thread::sleep_until(due);
        for (size_t sent = 0; sent < data.size();) {
          const ssize_t n = send(to, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
          if (n <= 0) return;
          sent += n;
        }
      }
    });
  }

  const int upstream_;
  const std::chrono::microseconds delay_;
  int listener_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
};

// Median seconds per round of `workers` workers, each pushing and getting the new model
// by one call (PushPull) or two (Push, then Pull).
double RoundSeconds(double megabytes, int workers, double latency_ms, bool one_call, double seconds) {
  const ModelLayout layout = LayoutOfMegabytes(megabytes);
  server::ServerOptions o;
  o.mode = server::Mode::kSync;
  o.num_workers = workers;
  o.controller.global_batch = 32 * workers;
  o.controller.policy = controller::Policy::kOff;
  o.optimizer.momentum = 0;
  std::unique_ptr<LocalServer> s = StartLocalServer(o);
  std::unique_ptr<DelayRelay> relay;
  int port = s->port;
  if (latency_ms > 0) {
    relay = std::make_unique<DelayRelay>(port, std::chrono::microseconds(static_cast<int64_t>(latency_ms * 1000)));
    port = relay->port();
  }
  const int rounds = std::max(
      5,
      std::min(200, static_cast<int>(seconds / (0.002 + megabytes * workers * 2 / 1000.0 + 2 * latency_ms / 1000.0))));
  std::vector<double> times;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      auto client = ClientTo(port);
      std::vector<float> weights(layout.total_elements(), 0.5f), gradient(layout.total_elements(), 1e-6f);
      absl::StatusOr<worker::JoinReply> joined = JoinAs(*client, "w" + std::to_string(w), layout, w == 0, weights);
      if (!joined.ok()) return (void)++failures;
      uint64_t version = *client->Pull(joined->worker_id, ~0ull, layout, absl::MakeSpan(weights));
      int64_t batch = joined->batch_size;  // the batch the server last told this worker
      for (int r = 0; r < rounds; ++r) {
        const worker::PushedStep ph = StepOf(joined->worker_id, batch, version, 0.001);
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<worker::PushReply> reply =
            one_call ? client->PushPull(ph, layout, gradient, &version, absl::MakeSpan(weights))
                     : client->Push(ph, layout, gradient);
        if (!reply.ok()) return (void)++failures;
        if (reply->next_batch_size > 0) batch = reply->next_batch_size;
        if (!one_call) {
          auto v = client->Pull(joined->worker_id, version, layout, absl::MakeSpan(weights));
          if (!v.ok()) return (void)++failures;
          version = *v;
        }
        if (w == 0) times.push_back(Seconds(start));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failures.load() > 0) throw std::runtime_error("a worker failed");
  return Median(times);
}

absl::StatusOr<nlohmann::json> MeasureAll() {
  const int workers = absl::GetFlag(FLAGS_workers);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  std::printf(
      "round: %d workers, sync, zero compute; a round = every worker pushes and gets the new model.\n"
      "pure transfer = the round's bytes (2 x workers x model) at the TCP rate measured just before; the median of\n"
      "the trials (by overhead) is shown, with the range.\n",
      workers);
  nlohmann::json rows = nlohmann::json::array();
  auto sizes = ParseNumbers("sizes", absl::GetFlag(FLAGS_sizes), 0.001);
  if (!sizes.ok()) return sizes.status();
  for (double mb : *sizes) {
    const int64_t bytes = static_cast<int64_t>(mb * (1 << 20));
    std::vector<double> latencies = {0};
    if (absl::GetFlag(FLAGS_latency_ms) > 0) latencies.push_back(absl::GetFlag(FLAGS_latency_ms));
    for (double latency : latencies) {
      // This machine is shared: each trial takes its own baseline; the median one is kept.
      std::vector<nlohmann::json> trials;
      for (int t = 0; t < std::max(1, absl::GetFlag(FLAGS_trials)); ++t) {
        const double tcp_gbps =
            bytes / 1e9 / TcpSeconds(bytes, std::max(5, std::min(50, static_cast<int>(1e9 / bytes))));
        const double pure = 2.0 * workers * bytes / 1e9 / tcp_gbps;
        const double two = RoundSeconds(mb, workers, latency, /*one_call=*/false, seconds);
        const double one = RoundSeconds(mb, workers, latency, /*one_call=*/true, seconds);
        trials.push_back({{"megabytes", mb},
                          {"workers", workers},
                          {"one_way_latency_ms", latency},
                          {"tcp_gbps", tcp_gbps},
                          {"pure_transfer_seconds", pure},
                          {"push_then_pull_seconds", two},
                          {"push_pull_seconds", one},
                          {"overhead_seconds", one - pure - 2 * latency / 1000}});
      }
      std::sort(trials.begin(), trials.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
        return a["overhead_seconds"].get<double>() < b["overhead_seconds"].get<double>();
      });
      nlohmann::json row = trials[trials.size() / 2];
      row["trials"] = trials.size();
      row["overhead_seconds_min"] = trials.front()["overhead_seconds"];
      row["overhead_seconds_max"] = trials.back()["overhead_seconds"];
      std::printf(
          "%5.0f MB  latency %4.0f ms | Push+Pull %8.2f ms | PushPull %8.2f ms | pure transfer %7.2f ms | "
          "overhead %7.2f ms (%zu trials: %.2f-%.2f)\n",
          mb, latency, 1000 * row["push_then_pull_seconds"].get<double>(),
          1000 * row["push_pull_seconds"].get<double>(), 1000 * row["pure_transfer_seconds"].get<double>(),
          1000 * row["overhead_seconds"].get<double>(), trials.size(), 1000 * row["overhead_seconds_min"].get<double>(),
          1000 * row["overhead_seconds_max"].get<double>());
      std::fflush(stdout);
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace
}  // namespace bench
}  // namespace omnilearn

int main(int argc, char** argv) {
  return omnilearn::bench::BenchMain(argc, argv, "round", omnilearn::bench::MeasureAll);
}
