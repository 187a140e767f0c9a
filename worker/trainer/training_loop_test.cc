// The loop after the join, alone: a joined Session against a scripted server, the
// device work on a small MLP on synthetic data on the CPU. What Train() adds (options,
// device, data, the join) is trainer_test's.
#include "worker/trainer/training_loop.h"

#include <atomic>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "worker/client/scripted_server_testing.h"

namespace omnilearn {
namespace worker {
namespace {

TrainerOptions Small() {
  TrainerOptions o;
  o.name = "t0";
  o.max_iterations = 2;
  o.bucket_bytes = 0;  // whole pushes
  return o;
}

// A loop's parts, joined to `server` as the trainer would join them.
struct Rig {
  explicit Rig(ScriptedServer* server, const TrainerOptions& options)
      : o(options), timing(*StepTiming::Create(StepTimingOptions{}, Clock::Real())), series(nullptr, "t0") {
    setup.train = MakeSynthetic(100, 7);
    setup.test = MakeSynthetic(10, 8);
    setup.model = *MakeModel("mlp", 3);
    params = std::make_unique<FlatModel>(setup.model.get());
    SessionOptions so;
    so.worker.name = "t0";
    so.worker.dataset_size = 100;
    so.heartbeats = false;
    so.log = [this](const std::string& line) { notes.push_back(line); };
    so.interrupted = o.interrupted;
    session = std::make_unique<Session>(server, *params->Layout(), std::move(so));
    weights = params->Values();
    joined = session->Join(weights);
  }
  absl::StatusOr<TrainerResult> Run() {
    TrainingLoop loop(o, &setup, params.get(), &timing, session.get(), &series, &progress, weights);
    return loop.Run();
  }

  TrainerOptions o;
  TrainingSetup setup;
  std::unique_ptr<FlatModel> params;
  StepTiming timing;
  TrainerMetrics series;
  std::vector<std::string> notes;
  ProgressReporter progress{"t0", 0, [this](const std::string& line) { notes.push_back(line); }};
  std::unique_ptr<Session> session;
  std::vector<float> weights;
  absl::Status joined;
};

TEST_CASE("an idle worker waits with the server until samples come back, then trains them", "[training_loop]") {
  ScriptedServer server;
  server.idle_replies = 3;  // the join and two waits answered idle, the third wait brings samples
  Rig rig(&server, Small());
  REQUIRE(rig.joined.ok());
  REQUIRE(rig.session->idle());
  absl::StatusOr<TrainerResult> r = rig.Run();
  REQUIRE(r.ok());
  REQUIRE(r->iterations == 2);
  REQUIRE(server.pushed.size() == 5);
  for (int i = 0; i < 3; ++i) REQUIRE(server.pushed[i].step.idle);
  for (int i = 3; i < 5; ++i) {
    REQUIRE_FALSE(server.pushed[i].step.idle);
    REQUIRE(server.gradient_nonzero[i - 3]);
  }
  REQUIRE(server.pushed[3].step.batch_size == 4);  // the samples the last wait brought
  REQUIRE(server.leaves == std::vector<bool>{true});
}

TEST_CASE("an idle worker at the job's count ends finished, its last evaluation reported alone", "[training_loop]") {
  ScriptedServer server;
  server.idle_replies = 1;
  server.global_samples_when_idle = 20;  // 0.2 epochs of 100 samples: the job's count
  TrainerOptions o = Small();
  o.max_iterations = 0;
  o.epochs = 0.2;
  o.evaluate = true;
  Rig rig(&server, o);
  REQUIRE(rig.joined.ok());
  absl::StatusOr<TrainerResult> r = rig.Run();
  REQUIRE(r.ok());
  REQUIRE(r->iterations == 0);
  REQUIRE_FALSE(r->stopped_by_server);
  REQUIRE(r->test_accuracy >= 0);
  REQUIRE(server.pushed.size() == 2);
  REQUIRE(server.pushed[0].step.idle);
  REQUIRE(server.pushed[1].step.report_only);
  REQUIRE(server.pushed[1].step.end.test_accuracy == r->test_accuracy);
  REQUIRE(server.leaves == std::vector<bool>{true});
}

TEST_CASE("an interrupt leaves the job unfinished and says Cancelled", "[training_loop]") {
  ScriptedServer server;
  std::atomic<bool> interrupted{false};
  TrainerOptions o = Small();
  o.interrupted = &interrupted;
  Rig rig(&server, o);
  REQUIRE(rig.joined.ok());
  interrupted = true;
  absl::StatusOr<TrainerResult> r = rig.Run();
  REQUIRE(absl::IsCancelled(r.status()));
  REQUIRE(server.pushed.empty());
  REQUIRE(server.leaves == std::vector<bool>{false});
}

TEST_CASE("each push reports the previous iteration's communication time; the first none", "[training_loop]") {
  ScriptedServer server;
  TrainerOptions o = Small();
  o.max_iterations = 3;
  Rig rig(&server, o);
  REQUIRE(rig.joined.ok());
  absl::StatusOr<TrainerResult> r = rig.Run();
  REQUIRE(r.ok());
  REQUIRE(server.pushed.size() == 3);
  REQUIRE(server.pushed[0].step.communication_seconds == 0);
  for (int i = 1; i < 3; ++i) REQUIRE(server.pushed[i].step.communication_seconds > 0);
  REQUIRE(r->pushes_sent == 3);
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
