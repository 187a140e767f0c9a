#include "server/membership.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

WorkerRecord Named(const std::string& name, WorkerState state, uint64_t clock, absl::Time seen) {
  WorkerRecord w;
  w.name = name;
  w.state = state;
  w.clock = clock;
  w.last_seen = seen;
  return w;
}

TEST_CASE("the worker table answers the core's questions", "[membership]") {
  const absl::Time t0 = absl::UnixEpoch();
  Membership m;
  const WorkerId a = m.Add(Named("a", WorkerState::kActive, 5, t0)).id;
  const WorkerId b = m.Add(Named("b", WorkerState::kPending, 3, t0 + absl::Seconds(30))).id;
  const WorkerId c = m.Add(Named("c", WorkerState::kDropped, 1, t0)).id;
  const WorkerId d = m.Add(Named("a", WorkerState::kLeft, 0, t0)).id;
  REQUIRE(a == 1);
  REQUIRE(d == 4);
  REQUIRE(m.LiveCount() == 2);  // active and pending; dropped and left are not
  REQUIRE(m.SlowestClock(0) == 3u);
  REQUIRE(m.SlowestClock(b) == 5u);
  REQUIRE(m.FindCurrent(d) == nullptr);
  REQUIRE(m.FindCurrent(c) != nullptr);
  REQUIRE(m.CurrentNamed("a", 0)->id == a);
  REQUIRE(m.CurrentNamed("a", a) == nullptr);  // the session itself, rejoining
  std::vector<WorkerRecord*> expired = m.LeaseExpired(t0 + absl::Seconds(61), absl::Seconds(60));
  REQUIRE(expired.size() == 2);  // a and c; b was seen later, d has left
  REQUIRE(expired[0]->id == a);
  REQUIRE(expired[1]->id == c);
  REQUIRE_FALSE(m.AllLeft());
  for (auto& [id, w] : m) w.state = WorkerState::kLeft;
  REQUIRE(m.AllLeft());
  m.Clear();
  REQUIRE(m.empty());
  REQUIRE(m.Add(WorkerRecord()).id == 5);  // ids are never reused
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
