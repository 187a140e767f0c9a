// A PsClient for jobs whose parameters are sharded (docs/SHARDING.md): it talks to the
// coordinator as the plain client does, and when the coordinator's Join answer names
// shards, it cuts every gradient into slices (common/shard_map.h), pushes each slice to its
// server in parallel, or one after the other when the coordinator says so (the
// coordinator's carries the step report and decides), and puts the
// model back together from every slice. A streamed push (StartPushPull) opens one stream
// per slice: each tensor's pieces leave for their slices as backward finishes it, and the
// model's tensors are whole as soon as their pieces arrived. Without a shard map it passes
// every call through.
#ifndef OMNILEARN_WORKER_CLIENT_SHARDED_PS_CLIENT_H_
#define OMNILEARN_WORKER_CLIENT_SHARDED_PS_CLIENT_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/shard_map.h"
#include "worker/client/ps_client.h"

namespace omnilearn {
namespace worker {

// Used by one thread at a time, as the session uses its client (Heartbeat and
// SetSessionSecret may come from another).
class ShardedPsClient : public PsClient {
 public:
  // Makes the client of a shard server at "host:port".
  using Factory = std::function<absl::StatusOr<std::unique_ptr<PsClient>>(const std::string& address)>;
  ShardedPsClient(std::unique_ptr<PsClient> coordinator, Factory factory, const Clock* clock = Clock::Real())
      : coordinator_(std::move(coordinator)), factory_(std::move(factory)), clock_(clock) {}

  absl::StatusOr<JoinReply> Join(const JoinRequest& request, const ModelLayout& layout,
                                 absl::Span<const float> initial) override;
  absl::StatusOr<uint64_t> Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                absl::Span<float> weights) override;
  absl::StatusOr<PushReply> Push(const PushedStep& push, const ModelLayout& layout,
                                 absl::Span<const float> gradient) override;
  absl::StatusOr<PushReply> PushPull(const PushedStep& push, const ModelLayout& layout,
                                     absl::Span<const float> gradient, uint64_t* model_version,
                                     absl::Span<float> weights) override;
  absl::StatusOr<std::unique_ptr<PushStream>> StartPushPull(const PushedStep& push, const ModelLayout& layout,
                                                            absl::Span<const float> gradient) override;
  void SetSessionSecret(const std::string& secret) override;
  absl::StatusOr<Action> Heartbeat(uint64_t worker_id) override { return coordinator_->Heartbeat(worker_id); }
  absl::Status Leave(uint64_t worker_id, bool finished) override { return coordinator_->Leave(worker_id, finished); }
  // The coordinator's connection: a session joins there.
  bool AwaitConnection(absl::Duration timeout) override { return coordinator_->AwaitConnection(timeout); }

  int shards() const { return map_.has_value() ? map_->shards() : 1; }

  // A shard's slice whose push failed on the way (Unavailable: the connection broke) is sent
  // again on the same session, for up to this long, instead of failing the push: the worker
  // keeps its session and a sync job its round. The shard does not take a slice twice
  // (PushHeader.resend); while it still holds the first sending (ResourceExhausted: one push
  // in flight per session) or the connection is made again, the sending is tried again. A
  // shard's pull that fails Unavailable is made again alike (whole), for as long.
  static constexpr absl::Duration kResendFor = absl::Seconds(10);

 private:
  friend class ShardedPushStream;
  // Where a model tensor's pieces lie: slice, the piece's index in the slice's layout, its
  // offset in the slice's flat vector and in the model's, its size.
  struct PieceRef {
    int slice = 0;
    int index = 0;
    int64_t slice_offset = 0, flat = 0, size = 0;
  };
  // One call per slice, in parallel: `call(s, &version)` returns slice s's reply and sets the
  // version its model came at (left at kNoVersion when none came). Returns the coordinator's
  // reply, every slice's version in *moved, and keeps the shards' longest hold for the next
  // push.
  // A shard's slice whose call failed Unavailable is sent again (Resend); resent_[s] says so.
  using SliceCall = std::function<absl::StatusOr<PushReply>(int slice, uint64_t* version)>;
  absl::StatusOr<PushReply> ReplyOfEverySlice(const PushedStep& push, const SliceCall& call,
                                              std::vector<uint64_t>* moved);
  // Shard s's slice of `push` (gradient_[s]) sent again after `first` (kResendFor); its
  // model is not in the reply: the caller pulls it.
  absl::StatusOr<PushReply> Resend(int s, PushedStep push, const absl::Status& first);
  // After a PushPull's replies: the model at the coordinator's version from every slice's
  // reply (`moved`: the version each brought, kNoVersion for none), pulling the slices that
  // came at another. Returns the reply to give.
  absl::StatusOr<PushReply> Assemble(const PushedStep& push, const PushReply& reply, const std::vector<uint64_t>& moved,
                                     uint64_t* model_version, absl::Span<float> weights);
  // `push` with the shards' hold of the previous push (StepReport::shard_held_seconds).
  PushedStep WithShardHold(const PushedStep& push) const;
  // The client of slice s (0: the coordinator).
  PsClient* client(int s) { return s == 0 ? coordinator_.get() : shard_clients_[s - 1].get(); }
  // The coordinator ended the worker's session (its heartbeat says join again): a slice sent
  // or pulled again cannot be taken any more.
  bool SessionEnded(uint64_t worker_id);
  // Pulls every slice at least at `version` (shard s from have_[s]) into the model.
  absl::Status PullShards(uint64_t worker_id, uint64_t version, absl::Span<float> weights, bool whole);

  std::unique_ptr<PsClient> coordinator_;
  Factory factory_;
  const Clock* clock_;           // the resends' backoff
  std::optional<ShardMap> map_;  // set by a sharded Join
  bool in_order_ = false;        // the slices' pushes one after the other (JoinReply)
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<PsClient>> shard_clients_;
  std::vector<std::vector<float>> gradient_, weights_;  // per slice
  std::vector<std::vector<PieceRef>> pieces_;           // by model tensor
  std::vector<uint64_t> have_;                          // the version of each slice in the model
  std::optional<uint64_t> assembled_;                   // the version the caller's model was put together at
  std::vector<char> resent_;  // per slice: sent again in the last push (written by its slice's thread)
  // The longest a shard held the last push (the next push reports it to the coordinator).
  double shard_held_seconds_ = 0;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_SHARDED_PS_CLIENT_H_
