// Serves a metrics::Registry over HTTP on civetweb: GET /metrics answers the text
// format 0.0.4; / answers a one-line pointer to /metrics; anything else is 404, and
// methods other than GET and HEAD are 405. Kept apart from the metrics core, as in
// prometheus-cpp, so code that only records metrics does not link an HTTP server.
//
// Thread-safety: civetweb serves scrapes on its own threads; Start and the destructor
// are called from one thread.
#ifndef OMNILEARN_COMMON_METRICS_EXPOSER_H_
#define OMNILEARN_COMMON_METRICS_EXPOSER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"

struct mg_context;

namespace omnilearn {
namespace metrics {

class MetricsExposer {
 public:
  // Listens on bind_address:port (port 0 picks a free one; see port()). The registry
  // must outlive the exposer. InvalidArgument for a bad address or port, Unavailable
  // when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Start(const std::string& bind_address, int port,
                                                               const Registry* registry);
  ~MetricsExposer();  // stops serving; waits for scrapes in flight

  int port() const { return port_; }

 private:
  MetricsExposer(mg_context* ctx, int port) : ctx_(ctx), port_(port) {}
  mg_context* ctx_;
  int port_;
};

}  // namespace metrics
}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_METRICS_EXPOSER_H_
