// The server's worker table: one record per session, its state, lease and counters,
// and the queries the core's rules need (live workers, the slowest SSP clock, expired
// leases, a name's live session). Thread-compatible: the core calls it under its mutex.
#ifndef OMNILEARN_SERVER_CONTROL_MEMBERSHIP_H_
#define OMNILEARN_SERVER_CONTROL_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/worker_id.h"
#include "server/control/epoch_sampler.h"

namespace omnilearn {
namespace server {

enum class Device { kUnknown, kCpu, kCuda };
// kPending: joined during an open sync round, takes part from the next one.
enum class WorkerState { kActive, kPending, kDropped, kLeft };
std::string WorkerStateName(WorkerState state);

struct WorkerRecord {
  WorkerId id = 0;
  std::string name, host;
  Device device = Device::kUnknown;
  WorkerState state = WorkerState::kActive;
  absl::Time last_seen;
  uint64_t iterations = 0, samples = 0;
  double last_compute = 0, sum_compute = 0;
  // How long the server held its last push (from the push's arrival at the core to its
  // reply: the round's barrier, the step): what of the worker's communication time is not
  // its link's. Negative before its first push.
  double last_wait_seconds = -1;
  int64_t last_batch = 0;           // the batch of its last accepted push
  int64_t told_batch = 0;           // the batch the server last told it to train (join, reply)
  uint64_t emulation_overruns = 0;  // as it last reported (its emulated device's unfaithful steps)
  double last_loss = 0;             // ...its loss
  uint64_t last_version = 0;        // ...and the version it was computed on
  uint64_t clock = 0;               // ssp: iterations pushed, lifted to the slowest's on (re)admission
  bool expired = false;             // its lease ran out
  bool ended_unheard = false;       // the server ended it (lease): told at its next call
  bool uses_samples = false;        // joined with a data set size: trains what it is assigned
  SampleBatch assigned;             // samples assigned and not yet trained
  std::string secret;               // the session's secret (JoinResponse.session_secret)
  // Async: when its last push arrived, and the seconds between its pushes, smoothed (0:
  // fewer than two pushes). Adam's weight prediction reads the workers' paces.
  absl::Time last_push_at = absl::InfinitePast();
  double push_interval = 0;

  // Async: a push arrived at `now`. The interval moves a quarter of the way to the new
  // one, which counts as at most 4x the smoothed one (a pause moves it gradually).
  void NotePush(absl::Time now);

  // Takes part in rounds (active or pending).
  bool live() const { return state == WorkerState::kActive || state == WorkerState::kPending; }
};

class Membership {
 public:
  using Map = std::map<WorkerId, WorkerRecord>;

  // Adds the record under the next id (ids are never reused, across jobs too).
  WorkerRecord& Add(WorkerRecord w);
  // The record, or null for an unknown id.
  WorkerRecord* Find(WorkerId id);
  const WorkerRecord* Find(WorkerId id) const;
  // The record of a session that has not left, or null.
  WorkerRecord* FindCurrent(WorkerId id);
  // A session under `name` that has not left, other than `except`; or null.
  const WorkerRecord* CurrentNamed(const std::string& name, WorkerId except) const;

  size_t LiveCount() const;
  // ssp: the smallest clock among live workers other than `except` (nullopt: none).
  std::optional<uint64_t> SlowestClock(WorkerId except) const;
  // ssp's rule: worker `id` may go on when it is at most `bound` iterations ahead of the
  // slowest other live worker (always when it is alone, not live, or unknown).
  bool WithinSspBound(WorkerId id, uint64_t bound) const;
  // ssp: the live workers that keep `id` waiting (more than `bound` behind it).
  std::vector<WorkerRecord*> HoldingBack(WorkerId id, uint64_t bound);
  // sync: the active workers a round still waits for (`pushed` says who is in).
  std::vector<WorkerRecord*> Missing(const std::function<bool(WorkerId)>& pushed);
  // sync: the active workers' ids in id order; once a round closed and PromotePending ran,
  // the next round's members.
  std::vector<WorkerId> ActiveIds() const;
  void PromotePending();
  // Sessions that have not left and were silent for longer than `lease` at `now`.
  std::vector<WorkerRecord*> LeaseExpired(absl::Time now, absl::Duration lease);
  bool AllLeft() const;
  // The names whose newest session the server ended unheard (ended_unheard: a worker cut
  // off, paused or rolled back that has not joined again since).
  std::set<std::string> UnheardNames() const;

  // Keeps the table bounded under churn (joins and leaves for as long as the daemon
  // runs): a left session's record stays (for status and the summary) until a newer
  // session of the same name exists, and at most `max_left` left records stay in all (the
  // oldest go first). Returns the names no remaining record carries (their per-worker
  // metric series can go).
  std::vector<std::string> PruneLeft(size_t max_left = kMaxLeftRecords);
  static constexpr size_t kMaxLeftRecords = 256;

  size_t size() const { return workers_.size(); }
  bool empty() const { return workers_.empty(); }
  // Forgets every record (a new job); ids keep counting.
  void Clear() { workers_.clear(); }
  Map::iterator begin() { return workers_.begin(); }
  Map::iterator end() { return workers_.end(); }
  Map::const_iterator begin() const { return workers_.begin(); }
  Map::const_iterator end() const { return workers_.end(); }

 private:
  // Each name's newest session (the highest id).
  std::map<std::string, WorkerId> NewestIds() const;

  Map workers_;
  WorkerId next_id_ = 1;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_MEMBERSHIP_H_
