#include "controller/step_filter.h"

#include <catch2/catch.hpp>
#include <vector>

namespace omnilearn {
namespace controller {
namespace {

// Judges one step; the steps it lets through are added to *learnt.
StepVerdict Judge(StepFilter& f, int64_t batch, double seconds, std::vector<MeasuredStep>* learnt = nullptr,
                  bool overran = false, StepsSetAside* tally = nullptr) {
  std::vector<MeasuredStep> learn;
  StepsSetAside ignored;
  const StepVerdict v = f.Judge(batch, seconds, overran, &learn, tally != nullptr ? tally : &ignored);
  if (learnt != nullptr) learnt->insert(learnt->end(), learn.begin(), learn.end());
  return v;
}

StepFilter Steady(int64_t batch, double seconds, int steps, StepFilterOptions options = {}) {
  StepFilter f(options);
  for (int i = 0; i < steps; ++i) Judge(f, batch, seconds);
  return f;
}

TEST_CASE("the first step waits for the second: learnt when like it, dropped when a warm-up outlier") {
  StepFilter compiled(StepFilterOptions{});
  std::vector<MeasuredStep> learnt;
  StepsSetAside tally;
  CHECK(Judge(compiled, 32, 81.0, &learnt, false, &tally) == StepVerdict::kHeld);  // a compile step
  CHECK(Judge(compiled, 32, 0.3, &learnt, false, &tally) == StepVerdict::kAccepted);
  REQUIRE(learnt.size() == 1);
  CHECK(learnt[0].seconds == 0.3);
  CHECK(tally.warmup == 1);

  StepFilter plain(StepFilterOptions{});
  learnt.clear();
  tally = {};
  CHECK(Judge(plain, 32, 0.33, &learnt, false, &tally) == StepVerdict::kHeld);
  CHECK(Judge(plain, 64, 0.5, &learnt, false, &tally) == StepVerdict::kAccepted);
  REQUIRE(learnt.size() == 2);  // oldest first
  CHECK((learnt[0].batch == 32 && learnt[1].batch == 64));
  CHECK(tally.warmup == 0);

  StepFilterOptions off;
  off.judge_first = false;
  StepFilter kept(off);
  CHECK(Judge(kept, 32, 81.0) == StepVerdict::kAccepted);
}

TEST_CASE("a worker's first link time is set aside, the others learnt; off, every one is") {
  StepFilter f(StepFilterOptions{});
  CHECK_FALSE(f.LearnLink());  // its first round's, on new connections
  CHECK(f.LearnLink());
  CHECK(f.LearnLink());
  StepFilter off(StepFilterOptions::Off());
  CHECK(off.LearnLink());
}

TEST_CASE("an emulated device's overrun is the host's time, not the device's") {
  StepFilter f = Steady(32, 0.3, 4);
  std::vector<MeasuredStep> learnt;
  StepsSetAside tally;
  CHECK(Judge(f, 32, 0.3, &learnt, true, &tally) == StepVerdict::kOverran);
  CHECK(learnt.empty());
  CHECK(tally.overran == 1);
  CHECK(Judge(f, 32, 0.3, &learnt) == StepVerdict::kAccepted);
  // The first step overran: the second waits in its place.
  StepFilter g(StepFilterOptions{});
  CHECK(Judge(g, 32, 5.0, nullptr, true) == StepVerdict::kOverran);
  CHECK(Judge(g, 32, 0.3) == StepVerdict::kHeld);
}

TEST_CASE("a slow outlier is set aside; a run of them is a change of speed") {
  const int run = StepFilterOptions{}.run;
  StepFilter f = Steady(32, 0.3, 6);
  StepsSetAside tally;
  CHECK(Judge(f, 32, 1.0, nullptr, false, &tally) == StepVerdict::kOutlier);
  CHECK(tally.outlier == 1);
  CHECK(Judge(f, 32, 0.31) == StepVerdict::kAccepted);  // the run is broken
  for (int i = 1; i < run; ++i) CHECK(Judge(f, 32, 1.0) == StepVerdict::kOutlier);
  CHECK(Judge(f, 32, 1.0) == StepVerdict::kAccepted);  // the run is long enough: it slowed down
  CHECK(Judge(f, 32, 1.1) == StepVerdict::kAccepted);  // the run's steps bound the next at once
  CHECK(Judge(f, 32, 2.5) == StepVerdict::kOutlier);
}

TEST_CASE("the bound comes from steps at batches at least as large") {
  StepFilter f = Steady(32, 0.3, 6);
  CHECK(Judge(f, 16, 0.25) == StepVerdict::kAccepted);  // a smaller batch takes no longer
  CHECK(Judge(f, 16, 0.7) == StepVerdict::kOutlier);
  CHECK(Judge(f, 16, 0.2) == StepVerdict::kAccepted);
  CHECK(Judge(f, 32, 0.01) == StepVerdict::kAccepted);  // faster is never an outlier
  // A batch larger than the recent ones is not judged: a memory limit shows there first.
  CHECK(Judge(f, 48, 5.0) == StepVerdict::kAccepted);
}

TEST_CASE("the outlier test waits for a few steps and can be turned off") {
  StepFilter f = Steady(32, 0.3, 2);  // two steps learnt
  CHECK(Judge(f, 32, 3.0) == StepVerdict::kAccepted);
  StepFilterOptions off;
  off.factor = 0;
  StepFilter g = Steady(32, 0.3, 6, off);
  CHECK(Judge(g, 32, 30.0) == StepVerdict::kAccepted);
}

}  // namespace
}  // namespace controller
}  // namespace omnilearn
