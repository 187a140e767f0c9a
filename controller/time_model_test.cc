#include "controller/time_model.h"

#include <catch2/catch.hpp>

namespace omnilearn {
namespace controller {
namespace {

Observation At(int64_t batch, double seconds, double samples = 10) { return Observation{batch, seconds, samples, 0}; }

TEST_CASE("a history at batches far apart fits the fixed part and the per-sample time", "[time_model]") {
  const TimeModel m = FitTimeModel({At(10, 0.2 + 0.01 * 10), At(40, 0.2 + 0.01 * 40)});
  REQUIRE(m.measured);
  REQUIRE(m.a == Approx(0.2));
  REQUIRE(m.c == Approx(0.01));
  REQUIRE(m.Seconds(100) == Approx(1.2));
}

TEST_CASE("batches too close together are fitted as proportional; none is not measured", "[time_model]") {
  const TimeModel m = FitTimeModel({At(30, 0.5), At(32, 0.6)});
  REQUIRE(m.a == 0);
  REQUIRE(m.c == Approx(1.1 / 62));  // pooled: total time over total samples
  REQUIRE_FALSE(FitTimeModel({}).measured);
}

TEST_CASE("the fixed part stays within [0, 0.9 x the fastest time]", "[time_model]") {
  // Times that would fit a negative fixed part go through the origin.
  REQUIRE(FitTimeModel({At(10, 0.05), At(40, 0.4)}).a == 0);
  // Nearly flat times would fit a fixed part above the fastest time's 90%.
  const TimeModel flat = FitTimeModel({At(10, 1.0), At(40, 1.01)});
  REQUIRE(flat.a == Approx(0.9));
  REQUIRE(flat.c > 0);
}

TEST_CASE("a window at a known batch merges; a changed time starts the history over", "[time_model]") {
  WorkerEstimator e(EstimatorOptions{0.25, 200});
  for (int i = 0; i < 4; ++i) e.AddStep(16, i % 2 ? 1.1 : 0.9);
  REQUIRE(e.Fold().empty());
  REQUIRE(e.history().size() == 1);
  REQUIRE(e.history()[0].mean_seconds == Approx(1.0));
  REQUIRE(e.history()[0].samples == 4);
  REQUIRE((e.window_fresh() && e.last_window_batch() == 16 && e.last_window_seconds() == Approx(1.0)));
  e.AddStep(16, 1.0);
  e.Fold();
  REQUIRE(e.history()[0].samples == 5);
  e.AddStep(32, 2.0);  // predicted: proportional, 2.0
  e.Fold();
  REQUIRE(e.history().size() == 2);
  e.AddStep(32, 4.0);  // the same batch, twice as slow: a slower worker
  REQUIRE(e.Fold().empty());
  REQUIRE(e.history().size() == 1);
  REQUIRE(e.history()[0].mean_seconds == 4.0);
  REQUIRE_FALSE((e.Fold(), e.window_fresh()));  // an empty window
}

TEST_CASE("a new batch far from the prediction is a surprise and the history goes", "[time_model]") {
  WorkerEstimator e;
  for (int i = 0; i < 3; ++i) e.AddStep(16, 1.0);
  e.Fold();
  for (int i = 0; i < 3; ++i) e.AddStep(32, 6.0);  // predicted 2.0
  const std::vector<WorkerEstimator::Surprise> s = e.Fold();
  REQUIRE(s.size() == 1);
  REQUIRE((s[0].before.batch == 16 && s[0].now.batch == 32 && s[0].now.mean_seconds == 6.0));
  REQUIRE(e.history().size() == 1);
  REQUIRE(e.history()[0].batch == 32);
}

TEST_CASE("a proportional history predicts a range: a fixed part it could not tell is no surprise", "[time_model]") {
  // A round of 4 local steps of 2 ms each plus 0.5 ms a sample, learnt at batches 41..44:
  // too close together for a fixed part, so proportional (0.69 ms a sample).
  const std::vector<Observation> history = {At(43, 0.0295), At(42, 0.029), At(44, 0.030)};
  const auto [low, high] = PredictedSeconds(history, 5);
  REQUIRE(low == Approx(5 * FitTimeModel(history).c));
  REQUIRE(high == Approx(0.9 * 0.029 + 5 * (0.0295 * 43 + 0.029 * 42 + 0.030 * 44 - 0.9 * 0.029 * 129) /
                                           (43 * 43 + 42 * 42 + 44 * 44)));
  // The job's last round, cut to 5 samples: 10.5 ms, three times the proportional time.
  WorkerEstimator e;
  e.set_history(history);
  e.AddStep(5, 0.0105);
  REQUIRE(e.Fold().empty());
  REQUIRE(e.history().size() == 4);
  const TimeModel m = e.Fit();  // now far apart: the fixed part learnt
  REQUIRE(m.a == Approx(0.008).epsilon(0.05));
  REQUIRE(m.c == Approx(0.0005).epsilon(0.05));
  // A history far apart predicts its model's time alone.
  const auto [l2, h2] = PredictedSeconds({At(10, 0.3), At(40, 0.6)}, 20);
  REQUIRE((l2 == Approx(0.4) && h2 == Approx(0.4)));
}

TEST_CASE("the history keeps the newest observations, and the memory of a mean is capped", "[time_model]") {
  WorkerEstimator e(EstimatorOptions{0.25, 8});
  for (int64_t b : {10, 11, 12, 13, 14}) {
    for (int i = 0; i < 5; ++i) e.AddStep(b, 0.1 * b);
    e.Fold();
  }
  REQUIRE(e.history().size() == kMaxObservations);
  REQUIRE(e.history().front().batch == 11);
  for (int i = 0; i < 5; ++i) e.AddStep(14, 1.4);
  e.Fold();
  REQUIRE(e.history().back().samples == 8);  // 10 pooled, remembered as 8
  e.DropAbove(12);
  REQUIRE(e.history().size() == 2);
  REQUIRE(e.history().back().batch == 12);
}

TEST_CASE("the link time is the median of the recent ones, learnt at a fold", "[time_model]") {
  WorkerEstimator e;
  REQUIRE_FALSE(e.link_known());
  e.AddLink(0.2);
  e.AddLink(0.4);
  REQUIRE_FALSE(e.link_known());  // until the window is folded
  e.Fold();
  REQUIRE(e.link_known());
  REQUIRE(e.link_seconds() == Approx(0.3));
  e.AddLink(0.3);
  e.Fold();
  REQUIRE(e.link_seconds() == Approx(0.3));
  e.AddLink(5.0);  // one slow exchange: the plan is not swung by it
  e.Fold();
  REQUIRE(e.link_seconds() == Approx(0.35));
  e.Fold();
  REQUIRE(e.link_seconds() == Approx(0.35));  // a window without link times changes nothing
  // A link that slowed for good is learnt once it is most of the recent ones.
  for (int i = 0; i < 8; ++i) {
    e.AddLink(1.0);
    e.Fold();
  }
  REQUIRE(e.link_seconds() == Approx(1.0));
  // Only the recent ones count.
  for (int i = 0; i < 20; ++i) e.AddLink(0.1);
  e.Fold();
  REQUIRE(e.link_seconds() == Approx(0.1));
}

TEST_CASE("an observation's relative error is its mean's standard error", "[time_model]") {
  REQUIRE(Observation{8, 1.0, 1, 0}.RelativeError() == Approx(0.1));  // one sample: assumed
  REQUIRE(Observation{8, 2.0, 5, 0.8}.RelativeError() == Approx(std::sqrt(0.8 / 4 / 5) / 2));
}

}  // namespace
}  // namespace controller
}  // namespace omnilearn
