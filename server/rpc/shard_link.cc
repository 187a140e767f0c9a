#include "server/rpc/shard_link.h"

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_security.h"
#include "common/shard_map.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/data/parameter_store.h"
#include "server/rpc/ordered_apply.h"
#include "server/rpc/shard_wire.h"

namespace omnilearn {
namespace server {

namespace {

using CommandReader = grpc::ClientReaderInterface<v1::ShardCommand>;

// How the link logs the coordinator's own request to register again.
constexpr char kCoordinatorAsks[] = "the coordinator asks: ";

// A registration over the network: the call's reader with the channel it runs on.
class NetworkRegistration : public CommandReader {
 public:
  NetworkRegistration(std::shared_ptr<grpc::Channel> channel, grpc::ClientContext* ctx, const v1::ShardHello& hello,
                      bool legacy)
      : channel_(std::move(channel)),
        reader_(legacy ? v1::ParameterServer::NewStub(channel_)->Shard(ctx, hello)
                       : v1::ServerPeers::NewStub(channel_)->Shard(ctx, hello)) {}
  void WaitForInitialMetadata() override { reader_->WaitForInitialMetadata(); }
  bool NextMessageSize(uint32_t* size) override { return reader_->NextMessageSize(size); }
  bool Read(v1::ShardCommand* c) override { return reader_->Read(c); }
  grpc::Status Finish() override { return reader_->Finish(); }

 private:
  const std::shared_ptr<grpc::Channel> channel_;  // outlives the call
  const std::unique_ptr<grpc::ClientReader<v1::ShardCommand>> reader_;
};

}  // namespace

// One channel to the coordinator for each of the shard's calls to it: its registrations,
// its norm reductions, its checkpoint reports. It is pinged every keepalive and reconnects
// quickly. A connection the coordinator closed while this host was cut off is noticed and
// replaced: a norm reduction on a channel of its own, never pinged, had written into such a
// connection after the partition healed, failed "Connection reset by peer", and sent a
// clipped job back to its checkpoint a second time (bench/rejoin_after_heal.sh).
CoordinatorChannels::CoordinatorChannels(const ShardLinkOptions& options)
    : keepalive_(options.keepalive), credentials_(options.credentials), address_(options.coordinator) {}

std::shared_ptr<grpc::Channel> CoordinatorChannels::Get() {
  absl::MutexLock lock(&mu_);
  if (channel_ != nullptr) return channel_;
  grpc::ChannelArguments args;
  const int keepalive_ms = static_cast<int>(absl::ToInt64Milliseconds(keepalive_));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, keepalive_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, keepalive_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // the stream may carry nothing for minutes
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  channel_ = grpc::CreateCustomChannel(address_, credentials_, args);
  return channel_;
}

std::string CoordinatorChannels::address() {
  absl::MutexLock lock(&mu_);
  return address_;
}

bool CoordinatorChannels::Set(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (address == address_) return false;
  address_ = address;
  channel_ = nullptr;
  return true;
}

namespace {

std::unique_ptr<CommandReader> OpenOverNetwork(CoordinatorChannels& coordinator, grpc::ClientContext* ctx,
                                               const v1::ShardHello& hello, bool legacy) {
  return std::make_unique<NetworkRegistration>(coordinator.Get(), ctx, hello, legacy);
}

// A clipped job's norm reductions over the channel to the coordinator. A call waits
// while the other slices' members arrive: it is bounded by the slowest member's wait.
StepNormCall StepNormOverNetwork(const ShardLinkOptions& options, std::shared_ptr<CoordinatorChannels> coordinator) {
  return [coordinator, token = options.peer_token](const v1::ShardNorm& part) -> absl::StatusOr<double> {
    std::unique_ptr<v1::ServerPeers::Stub> stub = v1::ServerPeers::NewStub(coordinator->Get());
    grpc::ClientContext ctx;
    AddPeerToken(ctx, token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    v1::ShardNormTotal total;
    const grpc::Status s = stub->StepNorm(&ctx, part, &total);
    if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return total.sum_squares();
  };
}

// Checkpoint reports over the channel to the coordinator, each bounded by 5 s (a
// report lost is sent again with the next checkpoint's).
ReportCheckpointsCall ReportCheckpointsOverNetwork(const ShardLinkOptions& options,
                                                   std::shared_ptr<CoordinatorChannels> coordinator) {
  return [coordinator, token = options.peer_token](const v1::ShardCheckpoints& report) {
    std::unique_ptr<v1::ServerPeers::Stub> stub = v1::ServerPeers::NewStub(coordinator->Get());
    grpc::ClientContext ctx;
    AddPeerToken(ctx, token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::ShardCheckpointsAck ack;
    const grpc::Status s = stub->ReportCheckpoints(&ctx, report, &ack);
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  };
}

// How this shard reaches the other servers' peer calls.
PeerCalls PeerCallsOf(const ShardLinkOptions& options) { return PeerCalls{options.credentials, options.peer_token}; }

FetchReplicaCall FetchReplicaOverNetwork(PeerCalls calls) {
  return [calls](const std::string& from, int index, uint64_t version, uint64_t fingerprint) {
    return FetchReplica(PeerChannel(from, calls).get(), calls, index, version, fingerprint);
  };
}

}  // namespace

ShardLink::ShardLink(ShardLinkOptions options, ShardCore* shard)
    : options_(std::move(options)),
      coordinator_(std::make_shared<CoordinatorChannels>(options_)),
      applier_({options_.shards, options_.partition_bytes, options_.index, options_.checkpoint_dir,
                options_.checkpoint_keep, options_.log,
                options_.step_norm ? options_.step_norm
                : options_.open    ? nullptr  // a test's fake coordinator: it gives step_norm when it clips
                                   : StepNormOverNetwork(options_, coordinator_),
                options_.health,
                options_.report_checkpoints ? options_.report_checkpoints
                : options_.open             ? nullptr
                                            : ReportCheckpointsOverNetwork(options_, coordinator_),
                options_.keep_replica,
                options_.fetch_replica ? options_.fetch_replica
                : options_.open        ? nullptr
                                       : FetchReplicaOverNetwork(PeerCallsOf(options_))},
               shard) {}

absl::Status ShardLink::Prepare() { return applier_.Prepare(); }

void ShardLink::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

absl::Status ShardLink::Run() {
  const Clock* clock = options_.clock;
  absl::Time give_up = clock->Now() + options_.start_timeout;
  while (true) {
    bool registered = false;
    absl::Status s = FindCoordinator();
    if (s.ok()) s = RunOnce(&registered);
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return absl::OkStatus();
    }
    if (registered && (absl::IsAborted(s) || absl::IsUnavailable(s))) {
      // The job goes back to a common checkpoint, another slice was offered (Aborted), or
      // the link broke: a partition, or a restarting coordinator, which resumes from the
      // servers' common checkpoint.
      if (options_.log) {
        options_.log(absl::IsAborted(s) ? std::string(s.message())
                                        : absl::StrCat(s.message(), "; registering again for up to ",
                                                       absl::FormatDuration(options_.start_timeout)));
      }
      give_up = clock->Now() + options_.start_timeout;
      if (!absl::StartsWith(s.message(), kCoordinatorAsks)) clock->SleepFor(absl::Seconds(1));
      continue;
    }
    if (registered || !absl::IsUnavailable(s)) return s;
    if (clock->Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat("the coordinator ", coordinator_->address(), " did not answer in ",
                                                 absl::FormatDuration(options_.start_timeout), ": ", s.message()));
    }
    clock->SleepFor(absl::Seconds(1));
  }
}

absl::Status ShardLink::FindCoordinator() {
  if (!options_.resolve_coordinator) return absl::OkStatus();
  absl::StatusOr<std::string> address = options_.resolve_coordinator();
  if (absl::IsFailedPrecondition(address.status())) return address.status();  // the job finished: the link ends
  if (!address.ok()) return absl::UnavailableError(address.status().message());
  if (coordinator_->Set(*address) && options_.log) options_.log(absl::StrCat("the coordinator is ", *address));
  return absl::OkStatus();
}

absl::Status ShardLink::RunOnce(bool* registered) {
  grpc::ClientContext ctx;
  AddPeerToken(ctx, options_.peer_token);
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return absl::OkStatus();
    context_ = &ctx;
  }
  applier_.Restart();
  // The server-to-server service; a coordinator of the previous release serves the call in
  // its worker-facing service only (and answers the other UNIMPLEMENTED).
  std::unique_ptr<CommandReader> reader = options_.open
                                              ? options_.open(&ctx, Hello(), legacy_coordinator_)
                                              : OpenOverNetwork(*coordinator_, &ctx, Hello(), legacy_coordinator_);
  absl::Status applied;
  {
    // Applied in order on a thread of their own: read on while a step waits for a member.
    OrderedApply in_order(&applier_, [&ctx] { ctx.TryCancel(); });
    v1::ShardCommand c;
    while (reader->Read(&c)) {
      *registered = true;
      if (!in_order.Add(std::move(c))) break;
    }
    applier_.StreamEnded();
    applied = in_order.Finish();
  }
  if (!applied.ok()) ctx.TryCancel();
  grpc::Status finished = reader->Finish();
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }
  if (absl::IsAborted(applied)) return absl::AbortedError(absl::StrCat(applied.message(), ": registering again"));
  if (!applied.ok()) return applied;
  if (!*registered && finished.error_code() == grpc::StatusCode::UNIMPLEMENTED && !legacy_coordinator_) {
    legacy_coordinator_ = true;
    if (options_.log) options_.log("the coordinator is of the previous release: registering through ParameterServer");
    return RunOnce(registered);
  }
  if (*registered && finished.ok()) return absl::OkStatus();  // the coordinator's job ended
  if (finished.error_code() == grpc::StatusCode::ABORTED) {
    // The coordinator took the registration and asks for another: a recovery began, perhaps
    // before it sent this one anything (another shard's return kicked this one at once).
    // Registered all the same: never a refusal, which ends the link.
    *registered = true;
    return absl::AbortedError(absl::StrCat(kCoordinatorAsks, finished.error_message()));
  }
  if (*registered) {
    return absl::UnavailableError(
        absl::StrCat("lost the link to the coordinator ", coordinator_->address(), ": ", finished.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(finished.error_code()), finished.error_message());
}

absl::StatusOr<std::vector<float>> PullSlice(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                                             const std::string& auth_token, uint64_t session, const std::string& secret,
                                             const ModelLayout& slice, uint64_t version, uint64_t history,
                                             absl::Duration timeout) {
  auto stub = v1::ParameterServer::NewStub(grpc::CreateChannel(address, credentials));
  grpc::ClientContext ctx;
  AddBearerToken(ctx, auth_token);  // a Pull, as a worker's: under the export's own session
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::PullRequest request;
  request.set_worker_id(session);
  request.set_have_version(~0ull);
  request.set_session_secret(secret);
  request.set_min_version(version);
  std::unique_ptr<grpc::ClientReader<v1::PullResponse>> reader = stub->Pull(&ctx, request);
  v1::PullResponse r;
  ChunkAssembler assembler(&slice);
  absl::Status s;
  if (reader->Read(&r)) {
    if (!r.has_header() || r.header().model_version() != version) {
      s = absl::FailedPreconditionError(
          absl::StrFormat("the shard at %s sent version %d, not %d", address, r.header().model_version(), version));
    } else if (history != 0 && r.header().history() != 0 && r.header().history() != history) {
      s = absl::FailedPreconditionError(absl::StrFormat(
          "the slice at %s is not one model with slice 0: its step history at version %d is %016x, slice 0's %016x",
          address, version, r.header().history(), history));
    }
    while (s.ok() && reader->Read(&r))
      s = r.has_chunk() ? assembler.Add(r.chunk()) : absl::InvalidArgumentError("a second header");
  }
  if (!s.ok()) ctx.TryCancel();
  grpc::Status finished = reader->Finish();
  if (!s.ok()) return s;
  if (!finished.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(finished.error_code()),
                        absl::StrCat("the shard at ", address, ": ", finished.error_message()));
  }
  return assembler.Finish();
}

v1::ShardHello ShardLink::Hello() const {
  v1::ShardHello hello;
  hello.set_address(options_.address);
  hello.set_shards(static_cast<uint32_t>(options_.shards));
  hello.set_partition_bytes(options_.partition_bytes);
  hello.set_index(static_cast<uint32_t>(applier_.slice_asked()));
  for (uint64_t v : applier_.CheckpointVersions()) hello.add_checkpoint_versions(v);
  hello.set_fingerprint(applier_.fingerprint());
  hello.set_reduces_norm(true);
  hello.set_resets_jobs(true);
  hello.set_steps_ahead(true);
  if (options_.replicas != nullptr) {
    for (const auto& [index, versions] : options_.replicas->Held()) {
      v1::SliceReplicas* held = hello.add_replicas();
      held->set_index(static_cast<uint32_t>(index));
      for (uint64_t v : versions) held->add_versions(v);
    }
  }
  return hello;
}

}  // namespace server
}  // namespace omnilearn
