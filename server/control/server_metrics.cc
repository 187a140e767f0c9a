#include "server/control/server_metrics.h"

#include <map>
#include <set>

namespace omnilearn {
namespace server {

using metrics::ExponentialBuckets;

ServerMetrics::ServerMetrics(metrics::Registry& r)
    : worker_batch_size(r.AddGauge("omnilearn_worker_batch_size",
                                   "Mini-batch size the controller assigns to each live worker.", {"worker"})),
      worker_compute_seconds(r.AddHistogram("omnilearn_worker_compute_seconds",
                                            "Forward + loss + backward seconds each worker reported per iteration.",
                                            {"worker"}, ExponentialBuckets(0.001, 2, 16))),
      worker_link_seconds(r.AddHistogram("omnilearn_worker_link_seconds",
                                         "Seconds each worker's iteration spent on its link (its communication "
                                         "time less the server's wait), as the controller sees it.",
                                         {"worker"}, ExponentialBuckets(0.0001, 2, 18))),
      worker_emulation_overruns(r.AddGauge("omnilearn_worker_emulation_overruns",
                                           "Steps of each worker's emulated device (--emulate_device) whose real "
                                           "compute outlasted their emulated time, as the worker last reported: "
                                           "times the controller got that are not the device's.",
                                           {"worker"})),
      pushes(r.AddCounter(
          "omnilearn_pushes_total",
          "Gradient pushes by worker and result (applied, stale, invalid, out_of_memory, idle, dropped, report, "
          "unknown_worker, shutdown).",
          {"worker", "result"})),
      rounds(r.AddCounter("omnilearn_rounds_total", "Optimizer steps taken (sync rounds or applied pushes).").Add({})),
      push_bytes(r.AddCounter("omnilearn_push_bytes_total", "Gradient payload bytes received.").Add({})),
      pull_bytes(r.AddCounter("omnilearn_pull_bytes_total", "Model payload bytes sent.").Add({})),
      model_version(r.AddGauge("omnilearn_model_version", "Version of the model (optimizer steps).").Add({})),
      round_wait_seconds(r.AddHistogram("omnilearn_round_wait_seconds",
                                        "Sync: seconds from a round's first push to its close. SSP: seconds a "
                                        "push waited for the slowest worker.",
                                        {}, ExponentialBuckets(0.001, 2, 16))
                             .Add({})),
      staleness(r.AddHistogram("omnilearn_staleness",
                               "Async and SSP: versions the model moved between a worker's "
                               "pull and its push.",
                               {}, {0, 1, 2, 4, 8, 16, 32, 64, 128})
                    .Add({})),
      adjustments(r.AddCounter("omnilearn_controller_adjustments_total",
                               "Times the batch controller ran (each may keep or change the plan).")
                      .Add({})),
      plan_reverts(r.AddCounter("omnilearn_controller_plan_reverts_total",
                                "Plans the controller took back: their first rounds delivered less than the plan "
                                "before, and the workers' times were as before the change (noise).")
                       .Add({})),
      steps_set_aside(r.AddCounter("omnilearn_controller_steps_set_aside_total",
                                   "Steps the batch controller did not learn from, by reason: warmup (a worker's "
                                   "first step, an outlier against its second), overran (the worker's emulated "
                                   "device overran: the host's time), outlier (slower than twice the worker's "
                                   "recent steps at batches as large).",
                                   {"reason"})),
      workers(r.AddGauge("omnilearn_workers", "Workers by state (active, pending, dropped, left).", {"state"})),
      train_loss(r.AddGauge("omnilearn_train_loss", "Training loss in the last push.").Add({})),
      test_accuracy(r.AddGauge("omnilearn_test_accuracy", "Last test accuracy a worker reported (0..1).")),
      unauthenticated(r.AddCounter("omnilearn_unauthenticated_total",
                                   "Calls refused for a missing or wrong bearer token or peer secret.")
                          .Add({})) {}

void ServerMetrics::CollectModel(uint64_t version, double last_loss, std::optional<double> accuracy) {
  model_version.Set(static_cast<double>(version));
  train_loss.Set(last_loss);
  if (accuracy) test_accuracy.Add({}).Set(*accuracy);
}

void ServerMetrics::CollectWorkers(const Membership& members, const std::function<int64_t(WorkerId)>& batch_of) {
  std::map<WorkerState, int> by_state = {
      {WorkerState::kActive, 0}, {WorkerState::kPending, 0}, {WorkerState::kDropped, 0}, {WorkerState::kLeft, 0}};
  std::set<std::string> live, gone;
  for (const auto& [id, w] : members) {
    ++by_state[w.state];
    if (w.live()) {
      live.insert(w.name);
      worker_batch_size.Add({w.name}).Set(static_cast<double>(batch_of(id)));
    } else {
      gone.insert(w.name);
    }
  }
  for (const std::string& name : gone) {
    if (!live.count(name)) worker_batch_size.Remove({name});
  }
  for (const auto& [state, n] : by_state) workers.Add({WorkerStateName(state)}).Set(n);
}

void ServerMetrics::ForgetWorker(const std::string& name) {
  pushes.RemoveFirstLabel(name);
  worker_compute_seconds.Remove({name});
  worker_link_seconds.Remove({name});
  worker_emulation_overruns.Remove({name});
  worker_batch_size.Remove({name});
}

}  // namespace server
}  // namespace omnilearn
