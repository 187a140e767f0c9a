#include "worker/trainer/samples.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("the server's assignment is trained as given; an id outside the data set is refused", "[samples]") {
  SampleSource s(1, 100);
  absl::StatusOr<torch::Tensor> idx = s.Next({SampleSpan{0, {7, 3}}, SampleSpan{1, {99}}}, /*own_batch=*/8);
  REQUIRE(idx.ok());
  REQUIRE(idx->numel() == 3);  // the assignment, not the worker's own batch
  REQUIRE(idx->equal(torch::tensor({7, 3, 99}, torch::kInt64)));
  const absl::Status bad = s.Next({SampleSpan{0, {100}}}, 8).status();
  REQUIRE(absl::IsInvalidArgument(bad));
  REQUIRE(absl::StrContains(bad.message(), "sample 100 of a data set of 100"));
}

TEST_CASE("without an assignment, an epoch of the worker's own permutation, then a new one", "[samples]") {
  SampleSource s(5, 10), same(5, 10), other(6, 10);
  std::set<int64_t> epoch;
  for (int i = 0; i < 5; ++i) {
    torch::Tensor idx = *s.Next({}, 2);
    REQUIRE(idx.equal(*same.Next({}, 2)));  // seeded
    for (int64_t j = 0; j < 2; ++j) epoch.insert(idx[j].item<int64_t>());
  }
  REQUIRE(epoch.size() == 10);           // every sample once
  REQUIRE(s.Next({}, 4)->numel() == 4);  // the next epoch's
  bool differs = false;
  for (int i = 0; i < 5; ++i) differs = differs || !same.Next({}, 2)->equal(*other.Next({}, 2));
  REQUIRE(differs);  // another worker's seed, another order
}

TEST_CASE("the sample log writes 'epoch id' per applied sample; no path, no log", "[samples]") {
  const std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/log";
  {
    SampleLog log;
    REQUIRE(log.Open(path).ok());
    log.Applied({SampleSpan{2, {4, 5}}});
    SampleLog none;
    REQUIRE(none.Open("").ok());
    none.Applied({SampleSpan{0, {1}}});
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  REQUIRE(text.str() == "2 4\n2 5\n");
  SampleLog bad;
  REQUIRE(absl::IsInvalidArgument(bad.Open("/nonexistent/dir/log")));
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
