#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <thread>

#include "common/metrics_exposer.h"

namespace omnilearn {
namespace metrics {
namespace {

TEST_CASE("counters, gauges and labels serialize in text format 0.0.4") {
  Registry r;
  auto& pushes = r.AddCounter("t_pushes_total", "Pushes by result.", {"worker", "result"});
  pushes.Add({"w1", "applied"}).Increment();
  pushes.Add({"w1", "applied"}).Increment(2);
  pushes.Add({"a\"b\\c\nd", "stale"}).Increment(0.5);
  pushes.Add({"w1", "applied"}).Increment(-7);  // ignored: counters never go down
  r.AddGauge("t_version", "Model\\version\nnow.").Add({}).Set(42);
  CHECK(r.Serialize() ==
        "# HELP t_pushes_total Pushes by result.\n"
        "# TYPE t_pushes_total counter\n"
        "t_pushes_total{worker=\"a\\\"b\\\\c\\nd\",result=\"stale\"} 0.5\n"
        "t_pushes_total{worker=\"w1\",result=\"applied\"} 3\n"
        "# HELP t_version Model\\\\version\\nnow.\n"
        "# TYPE t_version gauge\n"
        "t_version 42\n");
}

TEST_CASE("histograms are cumulative with +Inf, _sum and _count") {
  Registry r;
  auto& h = r.AddHistogram("t_seconds", "Times.", {"worker"}, {0.1, 1});
  for (double v : {0.05, 0.1, 0.5, 3.0}) h.Add({"w"}).Observe(v);
  CHECK(r.Serialize() ==
        "# HELP t_seconds Times.\n"
        "# TYPE t_seconds histogram\n"
        "t_seconds_bucket{worker=\"w\",le=\"0.1\"} 2\n"
        "t_seconds_bucket{worker=\"w\",le=\"1\"} 3\n"
        "t_seconds_bucket{worker=\"w\",le=\"+Inf\"} 4\n"
        "t_seconds_sum{worker=\"w\"} 3.65\n"
        "t_seconds_count{worker=\"w\"} 4\n");
}

TEST_CASE("values format as the text format wants them") {
  CHECK(FormatValue(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  CHECK(FormatValue(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(FormatValue(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(FormatValue(3) == "3");
  CHECK(FormatValue(-0.25) == "-0.25");
  CHECK(FormatValue(0.1) == "0.1");
  CHECK(std::stod(FormatValue(1.0 / 3)) == 1.0 / 3);
  CHECK(FormatValue(1e20) == "1e+20");
}

TEST_CASE("removed children disappear; collect hooks run before each scrape") {
  Registry r;
  auto& g = r.AddGauge("t_batch", "Batch.", {"worker"});
  int scrapes = 0;
  r.AddCollectHook([&] { g.Add({"w" + std::to_string(++scrapes)}).Set(scrapes); });
  CHECK(r.Serialize().find("t_batch{worker=\"w1\"} 1\n") != std::string::npos);
  g.Remove({"w1"});
  const std::string s = r.Serialize();
  CHECK(s.find("w1") == std::string::npos);
  CHECK(s.find("t_batch{worker=\"w2\"} 2\n") != std::string::npos);
}

TEST_CASE("concurrent increments and observations are not lost") {
  Registry r;
  Counter& c = r.AddCounter("t_total", "n").Add({});
  Histogram& h = r.AddHistogram("t_h", "h", {}, {1}).Add({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(0.5);
      }
    });
  }
  std::thread scraper([&] {
    for (int i = 0; i < 50; ++i) (void)r.Serialize();
  });
  for (auto& t : threads) t.join();
  scraper.join();
  CHECK(c.Value() == 40000);
  CHECK(h.Collect().count == 40000);
}

TEST_CASE("process metrics read /proc") {
  Registry r;
  AddProcessMetrics(r);
  const std::string s = r.Serialize();
  for (const char* name : {"process_cpu_seconds_total ", "process_resident_memory_bytes ",
                           "process_start_time_seconds ", "process_open_fds ", "process_max_fds "}) {
    INFO(name);
    CHECK(s.find(std::string("\n") + name) != std::string::npos);
  }
  const size_t at = s.find("\nprocess_resident_memory_bytes ");
  CHECK(std::stod(s.substr(at + 31)) > 1e5);
  const size_t st = s.find("\nprocess_start_time_seconds ");
  CHECK(std::fabs(std::stod(s.substr(st + 28)) - static_cast<double>(time(nullptr))) < 3600);
}

// A minimal HTTP/1.0 client: the whole response, or "" when it cannot connect.
std::string Http(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    (void)!write(fd, request.data(), request.size());
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  }
  close(fd);
  return out;
}

// The status code of an HTTP response ("HTTP/1.x 200 OK ..."), or 0.
int StatusOf(const std::string& response) {
  return response.rfind("HTTP/1.", 0) == 0 && response.size() > 12 ? std::stoi(response.substr(9, 3)) : 0;
}

TEST_CASE("the exposer serves /metrics on loopback") {
  Registry r;
  r.AddCounter("t_requests_total", "n").Add({}).Increment(5);
  auto exposer = MetricsExposer::Start("127.0.0.1", 0, &r);
  REQUIRE(exposer.ok());
  const int port = (*exposer)->port();
  REQUIRE(port > 0);
  const std::string ok = Http(port, "GET /metrics HTTP/1.0\r\n\r\n");
  CHECK(StatusOf(ok) == 200);
  CHECK(ok.find("Content-Type: text/plain; version=0.0.4; charset=utf-8") != std::string::npos);
  CHECK(ok.find("\r\n\r\n# HELP t_requests_total n\n# TYPE t_requests_total counter\nt_requests_total 5\n") !=
        std::string::npos);
  CHECK(StatusOf(Http(port, "GET /nothing HTTP/1.0\r\n\r\n")) == 404);
  CHECK(StatusOf(Http(port, "POST /metrics HTTP/1.0\r\n\r\n")) == 405);
  const std::string head = Http(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
  CHECK(StatusOf(head) == 200);
  CHECK(head.find("t_requests_total") == std::string::npos);

  // The same port cannot be taken twice; bad input is refused.
  auto again = MetricsExposer::Start("127.0.0.1", port, &r);
  CHECK(again.status().code() == absl::StatusCode::kUnavailable);
  CHECK(MetricsExposer::Start("127.0.0.1", 70000, &r).status().code() == absl::StatusCode::kInvalidArgument);
  exposer->reset();
  CHECK(Http(port, "GET /metrics HTTP/1.0\r\n\r\n").empty());  // stopped
}

}  // namespace
}  // namespace metrics
}  // namespace omnilearn
