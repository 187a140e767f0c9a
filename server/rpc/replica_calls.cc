#include "server/rpc/replica_calls.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_security.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/checkpoint/replica_store.h"

namespace omnilearn {
namespace server {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

void Prepare(grpc::ClientContext& ctx, const PeerCalls& calls) {
  AddPeerToken(ctx, calls.peer_token);
  ctx.set_deadline(std::chrono::system_clock::now() + absl::ToChronoSeconds(calls.timeout));
}

// A stub on a channel its caller holds.
std::unique_ptr<v1::ServerPeers::Stub> StubOn(grpc::Channel* channel) {
  return v1::ServerPeers::NewStub(std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}));
}

}  // namespace

std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address, const PeerCalls& calls) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, kMaxMessageBytes);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  return grpc::CreateCustomChannel(address, calls.credentials, args);
}

bool WriteReplicaPieces(int index, uint64_t version, uint64_t fingerprint, const std::string& bytes,
                        const std::function<bool(const v1::ReplicaPiece&)>& write) {
  size_t at = 0;
  do {
    v1::ReplicaPiece piece;
    if (at == 0) {
      piece.set_index(static_cast<uint32_t>(index));
      piece.set_version(version);
      piece.set_fingerprint(fingerprint);
      piece.set_total_bytes(bytes.size());
    }
    const size_t n = std::min(kReplicaPieceBytes, bytes.size() - at);
    piece.set_data(bytes.data() + at, n);
    at += n;
    if (!write(piece)) return false;
  } while (at < bytes.size());
  return true;
}

absl::Status ReplicaPieces::Add(v1::ReplicaPiece& piece) {
  if (!started_) {
    if (piece.total_bytes() > kMaxReplicaBytes || piece.index() > kMaxSliceIndex) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a replica of slice %u in %d bytes: past the bounds (%d slices, %d bytes)", piece.index(),
                          piece.total_bytes(), kMaxSliceIndex, kMaxReplicaBytes));
    }
    started_ = true;
    bytes_ = std::move(*piece.mutable_data());
    first_ = std::move(piece);
  } else {
    bytes_.append(piece.data());
  }
  if (bytes_.size() > first_.total_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat("a replica's pieces add up to %d bytes, past the %d it named",
                                                      bytes_.size(), first_.total_bytes()));
  }
  return absl::OkStatus();
}

absl::Status SendReplica(grpc::Channel* channel, const PeerCalls& calls, int index, uint64_t version,
                         uint64_t fingerprint, const std::string& bytes) {
  auto stub = StubOn(channel);
  grpc::ClientContext ctx;
  Prepare(ctx, calls);
  v1::ReplicaKept kept;
  std::unique_ptr<grpc::ClientWriter<v1::ReplicaPiece>> writer = stub->KeepReplica(&ctx, &kept);
  // A write that fails ends the call: Finish says why.
  WriteReplicaPieces(index, version, fingerprint, bytes, [&](const v1::ReplicaPiece& p) { return writer->Write(p); });
  writer->WritesDone();
  return FromGrpc(writer->Finish());
}

absl::StatusOr<CheckpointState> FetchReplica(grpc::Channel* channel, const PeerCalls& calls, int index,
                                             uint64_t version, uint64_t fingerprint) {
  auto stub = StubOn(channel);
  grpc::ClientContext ctx;
  Prepare(ctx, calls);
  v1::ReplicaRequest request;
  request.set_index(static_cast<uint32_t>(index));
  request.set_version(version);
  request.set_fingerprint(fingerprint);
  std::unique_ptr<grpc::ClientReader<v1::ReplicaPiece>> reader = stub->FetchReplica(&ctx, request);
  ReplicaPieces pieces;
  v1::ReplicaPiece piece;
  while (reader->Read(&piece)) {
    if (absl::Status s = pieces.Add(piece); !s.ok()) {
      ctx.TryCancel();
      return s;
    }
  }
  if (absl::Status s = FromGrpc(reader->Finish()); !s.ok()) return s;
  if (!pieces.complete()) return absl::DataLossError("a replica's pieces ended before its size");
  return DecodeCheckpoint(pieces.Take());
}

ReplicaSender::ReplicaSender(Send send, std::function<void(const std::string&)> log)
    : send_(std::move(send)), log_(std::move(log)), thread_([this] { Run(); }) {}

ReplicaSender::ReplicaSender(PeerCalls calls, std::function<void(const std::string&)> log)
    : ReplicaSender(
          [calls, channels = std::make_shared<std::map<std::string, std::shared_ptr<grpc::Channel>>>()](
              const std::string& to, int index, uint64_t version, uint64_t fingerprint, const std::string& bytes) {
            std::shared_ptr<grpc::Channel>& channel = (*channels)[to];  // the sender's thread only
            if (channel == nullptr) channel = PeerChannel(to, calls);
            return SendReplica(channel.get(), calls, index, version, fingerprint, bytes);
          },
          std::move(log)) {}

ReplicaSender::~ReplicaSender() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ReplicaSender::Keep(const std::string& to, const CheckpointState& state, uint64_t fingerprint) {
  absl::MutexLock lock(&mu_);
  waiting_ = Pending{to, state, fingerprint};
}

void ReplicaSender::Drain() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || (!busy_ && !waiting_.has_value()); };
  mu_.Await(absl::Condition(&idle));
}

uint64_t ReplicaSender::sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

uint64_t ReplicaSender::bytes_sent() const {
  absl::MutexLock lock(&mu_);
  return bytes_sent_;
}

void ReplicaSender::ExportMetrics(metrics::Registry& registry) {
  absl::MutexLock lock(&mu_);
  sent_counter_ = &registry
                       .AddCounter("omnilearn_replicas_sent_total",
                                   "this slice's replicas sent to the server "
                                   "that keeps them")
                       .Add({});
  bytes_counter_ =
      &registry.AddCounter("omnilearn_replica_sent_bytes_total", "bytes of this slice's replicas sent").Add({});
  failed_counter_ = &registry
                         .AddCounter("omnilearn_replicas_failed_total",
                                     "replicas that did not reach the "
                                     "server that keeps them (the next checkpoint's is sent)")
                         .Add({});
}

void ReplicaSender::Run() {
  while (true) {
    Pending p;
    {
      absl::MutexLock lock(&mu_);
      busy_ = false;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || waiting_.has_value(); };
      mu_.Await(absl::Condition(&ready));
      if (stop_) return;
      p = *std::move(waiting_);
      waiting_.reset();
      busy_ = true;
    }
    // Encoded here, off the slice's own thread: the state shares the buffers it captured.
    absl::StatusOr<std::string> bytes = EncodeCheckpoint(p.state);
    absl::Status s = bytes.status();
    if (s.ok()) s = send_(p.to, p.state.slice, p.state.version, p.fingerprint, *bytes);
    absl::MutexLock lock(&mu_);
    if (s.ok()) {
      ++sent_;
      bytes_sent_ += bytes->size();
      if (sent_counter_ != nullptr) {
        sent_counter_->Increment();
        bytes_counter_->Increment(static_cast<double>(bytes->size()));
      }
      last_error_.clear();
      continue;
    }
    if (failed_counter_ != nullptr) failed_counter_->Increment();
    const std::string line = absl::StrCat("slice ", p.state.slice, "'s replica of version ", p.state.version,
                                          " did not reach ", p.to, " (the next checkpoint's is sent): ", s.message());
    if (s.message() != last_error_) Log(line);
    last_error_ = std::string(s.message());
  }
}

}  // namespace server
}  // namespace omnilearn
