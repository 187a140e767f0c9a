#include "server/control/membership.h"

#include <set>

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

TEST_CASE("left records are pruned: one per name, and a bounded number in all", "[membership]") {
  Membership m;
  auto add = [&](const std::string& name, WorkerState state) {
    WorkerRecord w;
    w.name = name;
    w.state = state;
    return m.Add(std::move(w)).id;
  };
  const WorkerId a1 = add("a", WorkerState::kLeft);
  add("b", WorkerState::kActive);
  REQUIRE(m.PruneLeft().empty());  // a's only record stays (status, summary)
  REQUIRE(m.size() == 2);
  const WorkerId a2 = add("a", WorkerState::kActive);  // a rejoins: its left record goes
  REQUIRE(m.PruneLeft().empty());                      // the name is still carried by a2
  REQUIRE(m.Find(a1) == nullptr);
  REQUIRE(m.Find(a2) != nullptr);
  // Churn: 300 join/leave cycles under 3 names leave 3 records plus the live one.
  for (int i = 0; i < 300; ++i) {
    add("c" + std::to_string(i % 3), WorkerState::kLeft);
    m.PruneLeft();
  }
  REQUIRE(m.size() == 2 + 3);
  // 300 distinct names: at most max_left left records stay; the dropped names are reported.
  size_t dropped = 0;
  for (int i = 0; i < 300; ++i) {
    add("n" + std::to_string(i), WorkerState::kLeft);
    dropped += m.PruneLeft(/*max_left=*/10).size();
  }
  size_t left = 0;
  for (const auto& [id, w] : m) left += w.state == WorkerState::kLeft ? 1 : 0;
  REQUIRE(left == 10);
  REQUIRE(dropped == 303 - 10);    // 303 left records (c0..c2 too), 10 kept: every other name is gone
  REQUIRE(m.Find(a2) != nullptr);  // live records are never pruned
}

TEST_CASE("ssp: a worker waits while a live one is more than the bound behind, and knows who", "[membership]") {
  const absl::Time t0 = absl::UnixEpoch();
  Membership m;
  const WorkerId fast = m.Add(Named("fast", WorkerState::kActive, 7, t0)).id;
  const WorkerId slow = m.Add(Named("slow", WorkerState::kActive, 4, t0)).id;
  const WorkerId pending = m.Add(Named("pending", WorkerState::kPending, 5, t0)).id;
  m.Add(Named("dropped", WorkerState::kDropped, 0, t0));  // not live: holds nobody back
  REQUIRE(m.WithinSspBound(fast, 3));                     // 7 <= 4 + 3
  REQUIRE_FALSE(m.WithinSspBound(fast, 2));
  REQUIRE(m.HoldingBack(fast, 3).empty());
  std::vector<WorkerRecord*> behind = m.HoldingBack(fast, 1);  // 4 + 1 < 7, 5 + 1 < 7
  REQUIRE(behind.size() == 2);
  REQUIRE(behind[0]->id == slow);
  REQUIRE(behind[1]->id == pending);
  REQUIRE(m.HoldingBack(fast, 2).size() == 1);  // 4 + 2 < 7; 5 + 2 is not
  m.Find(slow)->state = WorkerState::kDropped;
  REQUIRE(m.WithinSspBound(fast, 2));  // the slowest live other is now at 5
  m.Find(fast)->state = WorkerState::kLeft;
  REQUIRE(m.WithinSspBound(fast, 0));  // a worker that left waits for nobody
  REQUIRE(m.WithinSspBound(99, 0));    // nor does an unknown one
  REQUIRE(m.HoldingBack(99, 0).empty());
}

TEST_CASE("sync: a round waits for the active workers only; pending ones join the next", "[membership]") {
  const absl::Time t0 = absl::UnixEpoch();
  Membership m;
  const WorkerId a = m.Add(Named("a", WorkerState::kActive, 0, t0)).id;
  const WorkerId b = m.Add(Named("b", WorkerState::kActive, 0, t0)).id;
  const WorkerId p = m.Add(Named("p", WorkerState::kPending, 0, t0)).id;
  m.Add(Named("d", WorkerState::kDropped, 0, t0));
  std::set<WorkerId> pushed = {a};
  auto in = [&pushed](WorkerId id) { return pushed.count(id) > 0; };
  std::vector<WorkerRecord*> missing = m.Missing(in);
  REQUIRE(missing.size() == 1);
  REQUIRE(missing[0]->id == b);
  pushed.insert(b);
  REQUIRE(m.Missing(in).empty());  // neither the pending nor the dropped one is waited for
  REQUIRE(m.ActiveIds() == std::vector<WorkerId>{a, b});
  m.PromotePending();
  REQUIRE(m.Find(p)->state == WorkerState::kActive);
  REQUIRE(m.Missing(in).size() == 1);                        // the next round waits for it
  REQUIRE(m.ActiveIds() == std::vector<WorkerId>{a, b, p});  // the next round's members, in id order
}

TEST_CASE("a worker's pace: the seconds between its pushes, smoothed, a pause counted as 4x at most", "[membership]") {
  const absl::Time t0 = absl::UnixEpoch();
  WorkerRecord w;
  w.NotePush(t0);
  REQUIRE(w.push_interval == 0);  // one push: no interval yet
  w.NotePush(t0 + absl::Seconds(2));
  REQUIRE(w.push_interval == Approx(2));
  w.NotePush(t0 + absl::Seconds(3));
  REQUIRE(w.push_interval == Approx(0.75 * 2 + 0.25 * 1));
  const double before = w.push_interval;
  w.NotePush(t0 + absl::Seconds(103));  // paused 100 s
  REQUIRE(w.push_interval == Approx(0.75 * before + 0.25 * 4 * before));
  w.NotePush(t0 + absl::Seconds(103));  // the same instant: no interval
  REQUIRE(w.push_interval == Approx(0.75 * before + before));
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
