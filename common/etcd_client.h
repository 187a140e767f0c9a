// A client of etcd's v3 API (proto/etcd.proto) for the coordinator election
// (docs/reliability.md, "No single coordinator"): a candidate takes a key under a lease and
// keeps the lease alive; shards and workers read the key to find the coordinator. etcd's
// own guarantees (one value per key, a lease that expires TTL after its last renewal,
// linearizable reads) are what keep two coordinators apart across a partition.
#ifndef OMNILEARN_COMMON_ETCD_CLIENT_H_
#define OMNILEARN_COMMON_ETCD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace omnilearn {

// "etcd://HOST:PORT[,HOST:PORT...][/KEY]": etcd's client endpoints and the job's key
// (default kDefaultElectionKey). Every server and worker of a job names the same.
struct EtcdTarget {
  std::vector<std::string> endpoints;
  std::string key;
};
inline constexpr char kEtcdScheme[] = "etcd://";
inline constexpr char kDefaultElectionKey[] = "/omnilearn/coordinator";
// The key's value once its job finished (kept without a lease): no candidate takes that job
// again. A new job takes a key of its own.
inline constexpr char kJobFinished[] = "finished";

// Whether `address` names etcd (starts with etcd://) rather than a HOST:PORT.
bool IsEtcdAddress(absl::string_view address);
// InvalidArgument, saying what is wrong, for anything but the form above.
absl::StatusOr<EtcdTarget> ParseEtcdTarget(absl::string_view address);

// Thread-safe. Each call goes to the endpoint that answered last, then to the others in
// turn; each is bounded by `timeout`. Errors are etcd's, as absl codes (UNAVAILABLE or
// DEADLINE_EXCEEDED when no endpoint answered).
class EtcdClient {
 public:
  explicit EtcdClient(EtcdTarget target, absl::Duration timeout = absl::Seconds(2));
  ~EtcdClient();
  const EtcdTarget& target() const { return target_; }

  // The coordinator's address (the key's value). NotFound when no coordinator holds it,
  // FailedPrecondition when its job finished.
  absl::StatusOr<std::string> Coordinator() const;
  // A new lease of at least `ttl`; returns its id and sets *granted to etcd's TTL.
  absl::StatusOr<int64_t> Grant(absl::Duration ttl, absl::Duration* granted) const;
  // Puts the key = `value` under `lease` if, and only if, no one holds it (one
  // transaction). True when this call took it; false with *holder set to its value
  // (FailedPrecondition when it says the job finished).
  absl::StatusOr<bool> TakeKey(const std::string& value, int64_t lease, std::string* holder) const;
  // The job ended: the key, if it still holds `value`, holds kJobFinished with no lease.
  // FailedPrecondition when it held something else.
  absl::Status FinishJob(const std::string& value) const;
  // Renews `lease` once; NotFound when it expired (the key went with it).
  absl::Status KeepAlive(int64_t lease) const;
  absl::Status Revoke(int64_t lease) const;

 private:
  class Stubs;
  // Calls `call` on each endpoint's stubs until one answers (not UNAVAILABLE nor past its deadline).
  template <typename Call>
  absl::Status OnSomeEndpoint(const Call& call) const;

  absl::Status Finished() const;  // FailedPrecondition: the key's job finished

  const EtcdTarget target_;
  const absl::Duration timeout_;
  std::vector<std::unique_ptr<Stubs>> stubs_;  // by endpoint
  mutable absl::Mutex mu_;
  mutable size_t current_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_ETCD_CLIENT_H_
