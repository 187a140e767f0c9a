// The trainer against a scripted PsClient: no server, no network. A small MLP on
// synthetic data on the CPU, a few steps each.
#include "worker/trainer/trainer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "catch2/catch.hpp"
#include "worker/client/scripted_server_testing.h"

namespace omnilearn {
namespace worker {
namespace {

TrainerOptions Small() {
  TrainerOptions o;
  o.name = "t0";
  o.host = "here";
  o.device = "cpu";
  o.model = "mlp";
  o.dataset = "synthetic";
  o.synthetic_samples = 100;
  o.epochs = 0;
  o.max_iterations = 3;
  o.log_every = 0;
  o.bucket_bytes = 0;  // whole pushes
  return o;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST_CASE("the trainer trains the server's batch and samples, reports each step and leaves finished", "[trainer]") {
  ScriptedServer server;
  TrainerOptions o = Small();
  o.log_samples = TempPath("samples.txt");
  o.log_every = 1;
  std::vector<std::string> lines;
  o.log = [&lines](const std::string& line) { lines.push_back(line); };
  absl::StatusOr<TrainerResult> r = Train(o, server);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->iterations == 3);
  REQUIRE_FALSE(r->stopped_by_server);
  REQUIRE(server.joined.size() == 1);
  REQUIRE(server.joined[0].worker.name == "t0");
  REQUIRE(server.joined[0].worker.dataset_size == 100);
  REQUIRE(server.joined[0].worker.device == DeviceKind::kCpu);
  REQUIRE(server.pushed.size() == 3);
  REQUIRE(server.pushed[0].step.batch_size == 4);  // the join's
  REQUIRE(server.pushed[1].step.batch_size == 6);  // then each reply's
  for (size_t i = 0; i < server.pushed.size(); ++i) {
    const PushedStep& p = server.pushed[i];
    REQUIRE(p.worker_id == 1);
    REQUIRE(p.model_version == i);  // the model the reply before brought
    REQUIRE(p.step.end.compute_seconds > 0);
    REQUIRE(p.step.end.train_loss > 0);
    REQUIRE_FALSE(p.step.out_of_memory);
    REQUIRE(server.gradient_nonzero[i]);
  }
  REQUIRE(server.pushed[0].step.communication_seconds == 0);  // no earlier step
  REQUIRE(server.leaves == std::vector<bool>{true});
  // Exactly the assigned samples were trained: 4, 6, 6 of them, in order.
  std::ifstream log(o.log_samples);
  std::vector<uint64_t> trained;
  uint64_t epoch = 0, id = 0;
  while (log >> epoch >> id) trained.push_back(id);
  std::vector<uint64_t> want;
  for (size_t i = 0; i < 3; ++i)
    want.insert(want.end(), server.assigned[i][0].ids.begin(), server.assigned[i][0].ids.end());
  REQUIRE(trained == want);
  REQUIRE(r->pushes_sent == 3);
  REQUIRE(r->pushes_answered == 3);
  // What the user reads: the join, then a line per iteration, all through the sink.
  const auto has = [&lines](const std::string& prefix) {
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
  };
  REQUIRE(has("[t0] joined as worker 1: device=cpu batch=4 mode=sync") == 1);
  REQUIRE(has("[t0] it=") == 3);
  REQUIRE(has("[t0] it=1 batch=6 ") == 1);
}

TEST_CASE("a stop from the server ends training; a rejoin trains the step again", "[trainer]") {
  ScriptedServer stopping;
  stopping.actions[2] = Action::kStop;
  absl::StatusOr<TrainerResult> r = Train(Small(), stopping);
  REQUIRE(r.ok());
  REQUIRE(r->stopped_by_server);
  REQUIRE(r->iterations == 1);
  REQUIRE(stopping.leaves == std::vector<bool>{false});

  ScriptedServer rejoining;
  rejoining.actions[1] = Action::kRejoin;
  r = Train(Small(), rejoining);
  REQUIRE(r.ok());
  REQUIRE(r->iterations == 3);  // the step of the old session does not count
  REQUIRE(rejoining.joined.size() == 2);
  REQUIRE(rejoining.joined[1].resume_worker_id == 1);  // the session it replaces
  REQUIRE(rejoining.pushed.size() == 4);
  REQUIRE(rejoining.pushed[1].worker_id == 2);
}

TEST_CASE("at the last epoch's end the accuracy goes to the server alone, on the final model", "[trainer]") {
  ScriptedServer server;
  TrainerOptions o = Small();
  o.max_iterations = 0;
  o.epochs = 0.2;  // 20 of the 100 samples: 4 + 6 + 6 + 6
  o.evaluate = true;
  absl::StatusOr<TrainerResult> r = Train(o, server);
  REQUIRE(r.ok());
  REQUIRE(r->iterations == 4);
  REQUIRE(r->test_accuracy >= 0);
  REQUIRE(r->test_accuracy <= 1);
  REQUIRE(server.pushed.size() == 5);
  const PushedStep& report = server.pushed.back();
  REQUIRE(report.step.report_only);
  REQUIRE(report.step.end.test_accuracy == r->test_accuracy);
  for (size_t i = 0; i < 4; ++i) REQUIRE_FALSE(server.pushed[i].step.end.test_accuracy.has_value());
}

TEST_CASE("options the trainer cannot run with are refused before it joins", "[trainer]") {
  ScriptedServer server;
  TrainerOptions o = Small();
  o.max_iterations = 0;  // and epochs 0: no end
  REQUIRE(absl::IsInvalidArgument(Train(o, server).status()));
  o = Small();
  o.dataset = "imagenet";
  REQUIRE(absl::IsInvalidArgument(Train(o, server).status()));
  REQUIRE(absl::IsInvalidArgument(ParseWarmup("sometimes").status()));
  REQUIRE(*ParseWarmup("off") == Warmup::kOff);
  REQUIRE(server.joined.empty());
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
