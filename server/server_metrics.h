// The server's Prometheus series: a stable contract for dashboards (deploy/grafana).
// Thread-safe (the families are).
#ifndef OMNILEARN_SERVER_SERVER_METRICS_H_
#define OMNILEARN_SERVER_SERVER_METRICS_H_

#include "common/metrics.h"

namespace omnilearn {
namespace server {

struct ServerMetrics {
  explicit ServerMetrics(metrics::Registry& r);

  metrics::Family<metrics::Gauge>& worker_batch_size;           // {worker}
  metrics::Family<metrics::Histogram>& worker_compute_seconds;  // {worker}
  metrics::Family<metrics::Histogram>& worker_link_seconds;     // {worker}
  metrics::Family<metrics::Counter>& pushes;                    // {worker, result}
  metrics::Counter& rounds;
  metrics::Counter& push_bytes;
  metrics::Counter& pull_bytes;
  metrics::Gauge& model_version;
  metrics::Histogram& round_wait_seconds;
  metrics::Histogram& staleness;
  metrics::Counter& adjustments;
  metrics::Family<metrics::Gauge>& workers;  // {state}
  metrics::Gauge& train_loss;
  // Series of their own only once a figure exists: absent before, never a made-up 0.
  metrics::Family<metrics::Gauge>& test_accuracy;
  metrics::Counter& unauthenticated;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_SERVER_METRICS_H_
