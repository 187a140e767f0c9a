#include "server/control/server_metrics.h"

#include <string>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

WorkerRecord Named(const std::string& name, WorkerState state) {
  WorkerRecord w;
  w.name = name;
  w.state = state;
  return w;
}

TEST_CASE("a scrape shows the model, workers by state and each live worker's batch", "[server_metrics]") {
  metrics::Registry registry;
  ServerMetrics m(registry);
  m.CollectModel(12, 0.5, std::nullopt);
  std::string text = registry.Serialize();
  REQUIRE(Has(text, "omnilearn_model_version 12"));
  REQUIRE(text.find("\nomnilearn_test_accuracy ") == std::string::npos);  // none measured: no series
  m.CollectModel(13, 0.25, 0.875);
  REQUIRE(Has(registry.Serialize(), "omnilearn_test_accuracy 0.875"));

  Membership workers;
  const WorkerId a = workers.Add(Named("a", WorkerState::kActive)).id;
  const WorkerId b = workers.Add(Named("b", WorkerState::kPending)).id;
  workers.Add(Named("c", WorkerState::kDropped));
  auto batch_of = [a, b](WorkerId id) { return id == a ? 48 : id == b ? 16 : 99; };
  m.CollectWorkers(workers, batch_of);
  text = registry.Serialize();
  REQUIRE(Has(text, "omnilearn_worker_batch_size{worker=\"a\"} 48"));
  REQUIRE(Has(text, "omnilearn_worker_batch_size{worker=\"b\"} 16"));
  REQUIRE(text.find("worker=\"c\"") == std::string::npos);  // not live: no batch
  REQUIRE(Has(text, "omnilearn_workers{state=\"active\"} 1"));
  REQUIRE(Has(text, "omnilearn_workers{state=\"dropped\"} 1"));
  REQUIRE(Has(text, "omnilearn_workers{state=\"left\"} 0"));

  workers.Find(a)->state = WorkerState::kLeft;  // a left: its batch series goes
  m.CollectWorkers(workers, batch_of);
  REQUIRE(registry.Serialize().find("omnilearn_worker_batch_size{worker=\"a\"}") == std::string::npos);

  m.pushes.Add({"b", "applied"}).Increment();
  m.ForgetWorker("b");
  text = registry.Serialize();
  REQUIRE(text.find("worker=\"b\"") == std::string::npos);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
