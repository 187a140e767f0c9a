#include "worker/trainer/trainer_metrics.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("a worker's series: absent until they have a value, then following the worker", "[trainer_metrics]") {
  metrics::Registry r;
  TrainerMetrics m(&r, "py0");
  std::string text = r.Serialize();
  REQUIRE(text.find("omnilearn_trainer_iterations_total{worker=\"py0\"} 0") != std::string::npos);
  REQUIRE(text.find("omnilearn_trainer_train_loss{") == std::string::npos);  // no push yet
  REQUIRE(text.find("omnilearn_trainer_batch_size{") == std::string::npos);
  REQUIRE(text.find("omnilearn_trainer_test_accuracy{") == std::string::npos);
  m.Iteration(16, 0.02, 0.01, 0.75, /*out_of_memory=*/false);
  m.Iteration(32, 0, 0.01, 0, /*out_of_memory=*/true);
  m.Accuracy(0.5);
  m.EmulationOverruns(3);
  m.EmulationOverruns(2);  // a total: never down
  m.Rejoins(1);
  text = r.Serialize();
  for (const char* line :
       {"omnilearn_trainer_iterations_total{worker=\"py0\"} 2", "omnilearn_trainer_samples_total{worker=\"py0\"} 16",
        "omnilearn_trainer_out_of_memory_total{worker=\"py0\"} 1", "omnilearn_trainer_batch_size{worker=\"py0\"} 32",
        "omnilearn_trainer_train_loss{worker=\"py0\"} 0.75", "omnilearn_trainer_test_accuracy{worker=\"py0\"} 0.5",
        "omnilearn_trainer_emulation_overruns_total{worker=\"py0\"} 3",
        "omnilearn_trainer_rejoins_total{worker=\"py0\"} 1", "omnilearn_trainer_step_seconds_count{worker=\"py0\"} 1",
        "omnilearn_trainer_communication_seconds_count{worker=\"py0\"} 2"}) {
    INFO(line);
    REQUIRE(text.find(line) != std::string::npos);
  }
  TrainerMetrics off(nullptr, "none");  // no registry: nothing recorded, nothing breaks
  off.Iteration(8, 0.1, 0.1, 1, false);
  off.Accuracy(1);
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
