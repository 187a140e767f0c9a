#include "worker/trainer/progress_reporter.h"

#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "worker/trainer/evaluation_schedule.h"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("progress lines: iterations every log_every, evaluations at whole epochs or within one", "[progress]") {
  std::vector<std::string> lines;
  ProgressReporter r("w0", 2, [&](const std::string& l) { lines.push_back(l); });
  for (int it = 0; it < 5; ++it) r.Iteration(it, 32, 0.5, 0.0123, 7);
  REQUIRE(lines.size() == 3);  // 0, 2, 4
  REQUIRE(lines[1] == "[w0] it=2 batch=32 loss=0.5000 compute=12.3ms version=7");
  lines.clear();
  r.Evaluation(3.0000000001, 1, 0.8765, 40);
  r.Evaluation(2.25, 0.25, 0.5, 41);
  r.Evaluation(2.999, 1, 0.5, 42);  // the end of training within an epoch: the epoch it is in
  r.Note("the server stopped the job");
  REQUIRE(lines == std::vector<std::string>{"[w0] epoch 3: test accuracy 87.65% (model version 40)",
                                            "[w0] epoch 2.25: test accuracy 50.00% (model version 41)",
                                            "[w0] epoch 2: test accuracy 50.00% (model version 42)",
                                            "[w0] the server stopped the job"});
  ProgressReporter quiet("w1", 0, [&](const std::string& l) { lines.push_back(l); });
  quiet.Iteration(0, 1, 1, 1, 1);
  REQUIRE(lines.size() == 4);
}

TEST_CASE("evaluations come each every_epochs of global progress and at the end", "[progress]") {
  EvaluationSchedule every_epoch(1.0, 100, /*global_samples=*/0);
  REQUIRE_FALSE(every_epoch.Due(60, false));
  REQUIRE(every_epoch.Due(100, false));
  REQUIRE_FALSE(every_epoch.Due(150, false));
  REQUIRE(every_epoch.Due(150, /*finished=*/true));
  // A worker joining at 2.5 epochs evaluates first at 3, then each quarter.
  EvaluationSchedule quarters(0.25, 100, 250);
  REQUIRE_FALSE(quarters.Due(260, false));
  REQUIRE(quarters.Due(275, false));
  REQUIRE_FALSE(quarters.Due(299, false));
  REQUIRE(quarters.Due(300, false));
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
