// The coordinator's election (--election=etcd://...; docs/reliability.md, "No single
// coordinator"). Candidates started on several hosts campaign for the job's etcd key; the
// one that takes it, under a lease, is the coordinator and publishes its address there;
// the others stand by until the key is gone. Shards and workers given the same etcd://
// address read the key to find the coordinator (ShardLinkOptions::resolve_coordinator,
// worker/client/following_ps_client.h).
//
// Two coordinators are impossible across a partition because the holder stops first: etcd
// keeps a lease at least its TTL after it received the last renewal, and the holder counts
// itself the holder only until half the TTL after it *sent* that renewal (LeaseTerm). So a
// holder cut off from etcd has exited (std::_Exit(kLostElection)) half a TTL before any
// other candidate can take the key, for clocks whose rates differ by less than 2x.
#ifndef OMNILEARN_SERVER_DAEMON_ELECTION_H_
#define OMNILEARN_SERVER_DAEMON_ELECTION_H_

#include <signal.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/etcd_client.h"
#include "server/daemon/flags.h"

namespace omnilearn {
namespace server {

// The exit status of a coordinator that could not renew its lease in time: another
// candidate may hold the job now. An orchestrator restarts it as a candidate.
inline constexpr int kLostElection = 3;

// The rule of a held lease: renewed every TTL/4; held until TTL/2 after the sending of the
// last renewal etcd answered (the grant's, at first).
class LeaseTerm {
 public:
  LeaseTerm(absl::Duration ttl, absl::Time granted_sent) : ttl_(ttl), renewed_sent_(granted_sent) {}
  void Renewed(absl::Time sent) { renewed_sent_ = std::max(renewed_sent_, sent); }
  absl::Time held_until() const { return renewed_sent_ + ttl_ / 2; }
  absl::Duration renew_every() const { return ttl_ / 4; }
  absl::Duration ttl() const { return ttl_; }

 private:
  absl::Duration ttl_;
  absl::Time renewed_sent_;
};

// A key this server holds: its lease and the lease's term.
struct HeldKey {
  int64_t lease = 0;
  LeaseTerm term;
};

// Blocks until this server takes the key for `address` (its lease of `ttl`), standing by
// while another holds it. Between tries it calls `wait(d)`, which returns false to give up
// (a signal): Cancelled. etcd out of reach is logged and tried again.
absl::StatusOr<HeldKey> Campaign(const EtcdClient& etcd, const std::string& address, absl::Duration ttl,
                                 const Clock* clock, const std::function<bool(absl::Duration)>& wait,
                                 const std::function<void(const std::string&)>& log);

// Keeps a held key's lease from its own thread: renews it every term.renew_every() and
// calls `lost` once, from that thread, as soon as the term ran out or etcd says the lease
// expired. Thread-safe; the destructor stops it (and revokes nothing: a clean stop lets the
// lease run out, so no candidate takes a job this process is still ending).
class LeaseKeeper {
 public:
  LeaseKeeper(std::function<absl::Status()> renew, LeaseTerm term, const Clock* clock,
              std::function<void(const std::string&)> lost);
  ~LeaseKeeper();

 private:
  void Run();

  const std::function<absl::Status()> renew_;
  LeaseTerm term_;  // the keeper's thread only
  const Clock* const clock_;
  const std::function<void(const std::string&)> lost_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The job's key held by this coordinator, its lease kept (LeaseKeeper) until destroyed.
class Leadership {
 public:
  Leadership(std::shared_ptr<const EtcdClient> etcd, std::string address, const HeldKey& held,
             std::function<void(const std::string&)> lost);
  // The job finished: the lease is no longer kept, and the key says so with no lease (no
  // candidate takes the job again). Logs the outcome.
  void MarkJobFinished();

 private:
  const std::shared_ptr<const EtcdClient> etcd_;
  const std::string address_;
  const int64_t lease_;
  std::unique_ptr<LeaseKeeper> keeper_;
};

// The daemon's side: with --election, campaigns for this server's advertised address
// (standing by meanwhile; a SIGTERM or SIGINT then ends it: Cancelled; a finished job:
// FailedPrecondition) and keeps the lease once taken, ending the process with
// kLostElection when it is lost. Null without --election.
absl::StatusOr<std::unique_ptr<Leadership>> WinElection(const DaemonFlags& f, const sigset_t& signals);
// The exit status of a candidate that was not elected (WinElection's error): 0 for a finished
// job (said) or a signal while standing by, 1 otherwise (said).
int NotElected(const absl::Status& s);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_ELECTION_H_
