#include "common/metrics_exposer.h"

#include <civetweb.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace omnilearn {
namespace metrics {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

bool ReadOnlyMethod(const mg_request_info* info) {
  return std::strcmp(info->request_method, "GET") == 0 || std::strcmp(info->request_method, "HEAD") == 0;
}

int Reply(mg_connection* conn, const std::string& body) {
  mg_send_http_ok(conn, kContentType, static_cast<long long>(body.size()));
  if (std::strcmp(mg_get_request_info(conn)->request_method, "HEAD") != 0) mg_write(conn, body.data(), body.size());
  return 200;
}

int HandleMetrics(mg_connection* conn, void* cbdata) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (!ReadOnlyMethod(info)) return mg_send_http_error(conn, 405, "only GET and HEAD"), 405;
  if (std::strcmp(info->local_uri, "/metrics") != 0) return mg_send_http_error(conn, 404, "not found"), 404;
  return Reply(conn, static_cast<const Registry*>(cbdata)->Serialize());
}

int HandleOther(mg_connection* conn, void*) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (!ReadOnlyMethod(info)) return mg_send_http_error(conn, 405, "only GET and HEAD"), 405;
  if (std::strcmp(info->local_uri, "/") != 0) return mg_send_http_error(conn, 404, "not found; see /metrics"), 404;
  return Reply(conn, "OmniLearn metrics: /metrics\n");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(const std::string& bind_address, int port,
                                                                      const Registry* registry) {
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("metrics port ", port, " out of range"));
  if (bind_address.empty() || bind_address.find_first_of(" ,") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("bad metrics bind address '", bind_address, "'"));
  }
  static const unsigned kInit = mg_init_library(0);
  (void)kInit;
  // civetweb writes IPv6 listening addresses in brackets.
  const bool v6 = bind_address.find(':') != std::string::npos && bind_address.front() != '[';
  const std::string listen = absl::StrCat(v6 ? "[" : "", bind_address, v6 ? "]" : "", ":", port);
  const char* options[] = {"listening_ports", listen.c_str(),      "num_threads", "2",    "request_timeout_ms",
                           "10000",           "enable_keep_alive", "yes",         nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  mg_init_data init{&callbacks, nullptr, options};
  char text[256] = {0};
  unsigned code = 0;
  mg_error_data error{&code, text, sizeof(text)};
  mg_context* ctx = mg_start2(&init, &error);
  if (ctx == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", listen, ": ", text));
  }
  mg_set_request_handler(ctx, "/metrics", HandleMetrics, const_cast<Registry*>(registry));
  mg_set_request_handler(ctx, "/", HandleOther, nullptr);
  mg_server_port ports[4];
  const int n = mg_get_server_ports(ctx, 4, ports);
  const int bound = n > 0 ? ports[0].port : port;
  return std::unique_ptr<MetricsExposer>(new MetricsExposer(ctx, bound));
}

MetricsExposer::~MetricsExposer() { mg_stop(ctx_); }

}  // namespace metrics
}  // namespace omnilearn
