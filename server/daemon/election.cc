#include "server/daemon/election.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/daemon/exit.h"
#include "server/daemon/options.h"

namespace omnilearn {
namespace server {
namespace {

// The real time, to the millisecond, for the lines that order two coordinators' terms.
std::string WallTime() { return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()); }

}  // namespace

absl::StatusOr<HeldKey> Campaign(const EtcdClient& etcd, const std::string& address, absl::Duration ttl,
                                 const Clock* clock, const std::function<bool(absl::Duration)>& wait,
                                 const std::function<void(const std::string&)>& log) {
  std::string said;  // the last line logged: each state is said once
  const auto say = [&](const std::string& line) {
    if (line != said) log(line);
    said = line;
  };
  const absl::Duration pause = std::min(absl::Seconds(1), ttl / 4);
  while (true) {
    // A read while another holds the key; a lease only to try to take it.
    absl::StatusOr<std::string> holder = etcd.Coordinator();
    if (absl::IsNotFound(holder.status())) {
      const absl::Time sent = clock->Now();
      absl::Duration granted;
      absl::StatusOr<int64_t> lease = etcd.Grant(ttl, &granted);
      std::string other;
      const absl::StatusOr<bool> took = lease.ok() ? etcd.TakeKey(address, *lease, &other) : lease.status();
      if (took.ok() && *took) {
        log(absl::StrCat("elected at ", WallTime(), ": this server is the coordinator at ", address, " (etcd key ",
                         etcd.target().key, ", lease ", *lease, " of ", absl::FormatDuration(granted), ")"));
        return HeldKey{*lease, LeaseTerm(granted, sent)};
      }
      if (lease.ok()) (void)etcd.Revoke(*lease);  // not ours to keep: no key under it
      holder = took.ok() ? absl::StatusOr<std::string>(other) : took.status();
    }
    if (absl::IsFailedPrecondition(holder.status())) return holder.status();  // the job finished
    say(holder.ok() ? absl::StrCat("standing by: the coordinator is ", *holder, " (etcd key ", etcd.target().key, ")")
                    : absl::StrCat("standing by: etcd cannot be reached: ", holder.status().message()));
    if (!wait(pause)) return absl::CancelledError("stopped while standing by");
  }
}

LeaseKeeper::LeaseKeeper(std::function<absl::Status()> renew, LeaseTerm term, const Clock* clock,
                         std::function<void(const std::string&)> lost)
    : renew_(std::move(renew)), term_(term), clock_(clock), lost_(std::move(lost)), thread_([this] { Run(); }) {}

LeaseKeeper::~LeaseKeeper() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void LeaseKeeper::Run() {
  absl::Time next = clock_->Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      clock_->AwaitWithDeadline(mu_, absl::Condition(&stop_), std::min(next, term_.held_until()));
      if (stop_) return;
    }
    const absl::Time sent = clock_->Now();
    if (sent >= term_.held_until()) {
      lost_(absl::StrCat("no renewal of the etcd lease answered for ", absl::FormatDuration(term_.ttl() / 2)));
      return;
    }
    if (sent < next) continue;
    const absl::Status s = renew_();
    if (absl::IsNotFound(s)) {
      lost_(std::string(s.message()));
      return;
    }
    if (s.ok()) term_.Renewed(sent);
    next = sent + term_.renew_every();
  }
}

Leadership::Leadership(std::shared_ptr<const EtcdClient> etcd, std::string address, const HeldKey& held,
                       std::function<void(const std::string&)> lost)
    : etcd_(std::move(etcd)),
      address_(std::move(address)),
      lease_(held.lease),
      keeper_(std::make_unique<LeaseKeeper>([etcd = etcd_, lease = lease_] { return etcd->KeepAlive(lease); },
                                            held.term, Clock::Real(), std::move(lost))) {}

void Leadership::MarkJobFinished() {
  keeper_.reset();  // a renewal after the revocation below would find the lease gone
  absl::Status s = etcd_->FinishJob(address_);
  if (s.ok()) s = etcd_->Revoke(lease_);
  std::printf("omnilearn_server: etcd %s\n", s.ok() ? "says the job is finished" : std::string(s.message()).c_str());
  std::fflush(stdout);
}

int NotElected(const absl::Status& s) {
  if (absl::IsFailedPrecondition(s)) {  // the job finished
    std::printf("omnilearn_server: %s: nothing to coordinate\n", std::string(s.message()).c_str());
    return 0;
  }
  return absl::IsCancelled(s) ? 0 : Fail(s, 1);
}

absl::StatusOr<std::unique_ptr<Leadership>> WinElection(const DaemonFlags& f, const sigset_t& signals) {
  if (f.election.empty()) return nullptr;
  absl::StatusOr<EtcdTarget> target = ParseEtcdTarget(f.election);
  if (!target.ok()) return target.status();
  const absl::Duration ttl = absl::Seconds(f.election_ttl_s);
  // Every call fits in a renewal's period, so a hung etcd is noticed before the term ends.
  auto etcd = std::make_shared<const EtcdClient>(*target, ttl / 4);
  const auto log = [](const std::string& line) {
    std::printf("omnilearn_server: %s\n", line.c_str());
    std::fflush(stdout);
  };
  const auto wait = [&signals](absl::Duration d) {
    const timespec pause = {static_cast<time_t>(absl::ToInt64Seconds(d)),
                            static_cast<long>(absl::ToInt64Nanoseconds(d % absl::Seconds(1)))};
    return sigtimedwait(&signals, nullptr, &pause) <= 0;
  };
  const std::string address = AdvertisedAddress(f, f.port);
  absl::StatusOr<HeldKey> held = Campaign(*etcd, address, ttl, Clock::Real(), wait, log);
  if (!held.ok()) return held.status();
  return std::make_unique<Leadership>(etcd, address, *held, [](const std::string& why) {
    std::fprintf(stderr,
                 "omnilearn_server: the coordinator stops at once at %s: %s; another candidate may hold the job\n",
                 WallTime().c_str(), why.c_str());
    std::fflush(stderr);
    std::_Exit(kLostElection);
  });
}

}  // namespace server
}  // namespace omnilearn
