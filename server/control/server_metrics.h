// The server's Prometheus series: a stable contract for dashboards (deploy/grafana).
// Thread-safe (the families are).
#ifndef OMNILEARN_SERVER_CONTROL_SERVER_METRICS_H_
#define OMNILEARN_SERVER_CONTROL_SERVER_METRICS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/metrics.h"
#include "server/control/membership.h"

namespace omnilearn {
namespace server {

struct ServerMetrics {
  explicit ServerMetrics(metrics::Registry& r);

  metrics::Family<metrics::Gauge>& worker_batch_size;           // {worker}
  metrics::Family<metrics::Histogram>& worker_compute_seconds;  // {worker}
  metrics::Family<metrics::Histogram>& worker_link_seconds;     // {worker}
  metrics::Family<metrics::Gauge>& worker_emulation_overruns;   // {worker}
  metrics::Family<metrics::Counter>& pushes;                    // {worker, result}
  metrics::Counter& rounds;
  metrics::Counter& push_bytes;
  metrics::Counter& pull_bytes;
  metrics::Gauge& model_version;
  metrics::Histogram& round_wait_seconds;
  metrics::Histogram& staleness;
  metrics::Counter& adjustments;
  metrics::Counter& plan_reverts;
  metrics::Family<metrics::Counter>& steps_set_aside;  // {reason}
  metrics::Family<metrics::Gauge>& workers;            // {state}
  metrics::Gauge& train_loss;
  // Series of their own only once a figure exists: absent before, never a made-up 0.
  metrics::Family<metrics::Gauge>& test_accuracy;
  metrics::Counter& unauthenticated;

  // At a scrape: the model's version, the last loss, the accuracy once one was measured.
  void CollectModel(uint64_t version, double last_loss, std::optional<double> test_accuracy);
  // At a scrape: workers by state, and each live worker's batch (`batch_of` its id). A
  // name with no live session loses its batch series.
  void CollectWorkers(const Membership& workers, const std::function<int64_t(WorkerId)>& batch_of);
  // Drops every per-worker series of `name` (no record carries the name any more).
  void ForgetWorker(const std::string& name);
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_SERVER_METRICS_H_
