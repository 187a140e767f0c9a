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

TEST_CASE("link times are a window's mean, then smoothed across windows", "[time_model]") {
  WorkerEstimator e;
  REQUIRE_FALSE(e.link_known());
  e.AddLink(0.2);
  e.AddLink(0.4);
  e.Fold();
  REQUIRE(e.link_known());
  REQUIRE(e.link_seconds() == Approx(0.3));
  e.AddLink(0.5);
  e.Fold();
  REQUIRE(e.link_seconds() == Approx(0.4));  // half the new window's, half what was learnt
  e.Fold();
  REQUIRE(e.link_seconds() == Approx(0.4));  // a window without link times changes nothing
}

TEST_CASE("an observation's relative error is its mean's standard error", "[time_model]") {
  REQUIRE(Observation{8, 1.0, 1, 0}.RelativeError() == Approx(0.1));  // one sample: assumed
  REQUIRE(Observation{8, 2.0, 5, 0.8}.RelativeError() == Approx(std::sqrt(0.8 / 4 / 5) / 2));
}

}  // namespace
}  // namespace controller
}  // namespace omnilearn
