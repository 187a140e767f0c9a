#include "worker/client/timeline.h"

#include <string>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("Timeline writes one line per iteration, events in ms from its begin") {
  FakeClock clock(absl::FromUnixMillis(1000));
  std::vector<std::string> lines;
  Timeline timeline(&clock, [&](const std::string& line) { lines.push_back(line); });
  REQUIRE(timeline.enabled());
  timeline.Mark("bucket");  // before the first iteration: nothing to add it to
  timeline.Begin(7);
  clock.Advance(absl::Milliseconds(12.5));
  timeline.Mark("slice_reply", 2);
  timeline.Add("forward_wait", absl::Milliseconds(3));
  timeline.Time("forward_wait", [&] { clock.Advance(absl::Milliseconds(1)); });
  REQUIRE(lines.empty());
  timeline.Begin(8);  // the previous iteration is written
  REQUIRE(lines.size() == 1);
  REQUIRE(lines[0].find("\"iteration\":7,\"start_ms\":1000.000,\"events\":[[\"begin\",0.000,-1],"
                        "[\"slice_reply\",12.500,2]],\"totals\":{\"forward_wait\":4.000}}\n") != std::string::npos);
  timeline.Flush();
  REQUIRE(lines.size() == 2);
  REQUIRE(lines[1].find("\"iteration\":8,\"start_ms\":1013.500,\"events\":[[\"begin\",0.000,-1]],\"totals\":{}}") !=
          std::string::npos);
  timeline.Flush();  // nothing open: nothing written
  REQUIRE(lines.size() == 2);
}

TEST_CASE("A push opened after its step begins its line when the step's compute began") {
  FakeClock clock(absl::FromUnixMillis(1000));
  std::vector<std::string> lines;
  Timeline timeline(&clock, [&](const std::string& line) { lines.push_back(line); });
  timeline.Begin(3, absl::Milliseconds(40));  // a whole push: its step computed for 40 ms
  timeline.Mark("finish");
  timeline.Flush();
  REQUIRE(lines.size() == 1);
  REQUIRE(lines[0].find("\"start_ms\":960.000,\"events\":[[\"begin\",0.000,-1],[\"finish\",40.000,-1]]") !=
          std::string::npos);
}

TEST_CASE("A timeline without a writer records nothing and still runs what it times") {
  FakeClock clock;
  Timeline timeline(&clock, nullptr);
  REQUIRE(!timeline.enabled());
  timeline.Begin(1);
  bool ran = false;
  timeline.Time("forward_wait", [&] { ran = true; });
  REQUIRE(ran);
  timeline.Flush();
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
