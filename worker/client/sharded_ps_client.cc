#include "worker/client/sharded_ps_client.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "worker/client/timeline.h"

namespace omnilearn {
namespace worker {
namespace {

constexpr uint64_t kNoVersion = std::numeric_limits<uint64_t>::max();  // "send the whole slice"

// Runs fn(s) for s = 1..n-1 on threads and fn(0) here; the first error, by slice order.
absl::Status ForEachSlice(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int s = 1; s < n; ++s) threads.emplace_back([&, s] { status[s] = fn(s); });
  status[0] = fn(0);
  for (std::thread& t : threads) t.join();
  for (int s = 0; s < n; ++s) {
    if (!status[s].ok()) {
      return absl::Status(status[s].code(),
                          absl::StrCat(s == 0 ? "coordinator" : absl::StrCat("shard ", s), ": ", status[s].message()));
    }
  }
  return absl::OkStatus();
}

// `call` (on `client`) again while it fails Unavailable (a connection being made again) or ResourceExhausted
// (a shard still holding the first sending of a push), with a backoff of 0.1 s to 1 s, for up
// to ShardedPsClient::kResendFor after `first`, its first failure, and while `session_ended`
// is false: once the coordinator ended the session (the job went back to a common
// checkpoint, a lost shard's slice on a new server), NotFound: the worker joins again.
template <typename T>
absl::StatusOr<T> CallAgain(const Clock& clock, PsClient& client, const absl::Status& first, const char* what,
                            const std::function<absl::StatusOr<T>()>& call,
                            const std::function<bool()>& session_ended) {
  const absl::Time until = clock.Now() + ShardedPsClient::kResendFor;
  absl::Duration backoff = absl::Milliseconds(100);
  absl::Status last = first;
  int tries = 0;
  while (clock.Now() < until) {
    ++tries;
    absl::StatusOr<T> r = call();
    if (r.ok() || !(absl::IsUnavailable(r.status()) || absl::IsResourceExhausted(r.status()))) return r;
    last = r.status();
    if (session_ended()) {
      return absl::NotFoundError(absl::StrCat("the coordinator ended this session while the slice was ", what,
                                              " again (", last.message(), "): join again"));
    }
    PauseBeforeRetry(clock, client, backoff);
    backoff = std::min(2 * backoff, absl::Seconds(1));
  }
  return absl::UnavailableError(absl::StrFormat("%s again %d times in %.0f s, the last time: %s (the first: %s)", what,
                                                tries, absl::ToDoubleSeconds(ShardedPsClient::kResendFor),
                                                last.message(), first.message()));
}

}  // namespace

absl::StatusOr<JoinReply> ShardedPsClient::Join(const JoinRequest& request, const ModelLayout& layout,
                                                absl::Span<const float> initial) {
  absl::StatusOr<JoinReply> r = coordinator_->Join(request, layout, initial);
  if (!r.ok() || r->shards <= 1) {
    map_.reset();
    return r;
  }
  absl::StatusOr<ShardMap> map = ShardMap::Plan(layout, r->shards, r->partition_bytes, r->whole_tensors);
  if (!map.ok()) return map.status();
  if (map->fingerprint() != r->shard_fingerprint || static_cast<int>(r->shard_addresses.size()) != r->shards) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this worker's map of the model (%s, fingerprint %016x) is not the coordinator's (fingerprint %016x): "
        "worker and coordinator are of different releases",
        map->DebugString(), map->fingerprint(), r->shard_fingerprint));
  }
  if (addresses_ != r->shard_addresses) {
    shard_clients_.clear();
    for (int s = 1; s < r->shards; ++s) {
      absl::StatusOr<std::unique_ptr<PsClient>> c = factory_(r->shard_addresses[s]);
      if (!c.ok()) return c.status();
      shard_clients_.push_back(*std::move(c));
    }
    addresses_ = r->shard_addresses;
  }
  for (auto& c : shard_clients_) c->SetSessionBfloat16(r->bfloat16);  // the coordinator chose it
  map_ = *std::move(map);
  in_order_ = r->push_slices_in_order;
  gradient_.assign(map_->shards(), {});
  weights_.assign(map_->shards(), {});
  for (int s = 0; s < map_->shards(); ++s) {
    gradient_[s].resize(map_->slice_elements(s));
    weights_[s].resize(map_->slice_elements(s));
  }
  pieces_.assign(layout.tensors().size(), {});
  for (int s = 0; s < map_->shards(); ++s) {
    int64_t offset = 0;
    const std::vector<ShardPiece>& slice = map_->slice(s);
    for (int i = 0; i < static_cast<int>(slice.size()); ++i) {
      pieces_[slice[i].tensor].push_back(PieceRef{s, i, offset, slice[i].flat, slice[i].size()});
      offset += slice[i].size();
    }
  }
  have_.assign(map_->shards(), kNoVersion);
  assembled_.reset();
  return r;
}

void ShardedPsClient::SetSessionSecret(const std::string& secret) {
  coordinator_->SetSessionSecret(secret);
  for (auto& c : shard_clients_) c->SetSessionSecret(secret);
}

absl::Status ShardedPsClient::PullShards(uint64_t worker_id, uint64_t version, absl::Span<float> weights, bool whole) {
  return ForEachSlice(map_->shards(), [&](int s) -> absl::Status {
    if (s == 0) return absl::OkStatus();  // the caller has slice 0
    uint64_t have = whole ? kNoVersion : have_[s];
    const std::function<absl::StatusOr<uint64_t>()> pull = [&] {
      return client(s)->PullAtLeast(worker_id, have, version, map_->slice_layout(s), absl::MakeSpan(weights_[s]));
    };
    absl::StatusOr<uint64_t> v = pull();
    if (!v.ok() && absl::IsUnavailable(v.status())) {
      have = kNoVersion;  // the slice as it came, if partly: pulled whole (a pull changes nothing)
      v = CallAgain(*clock_, *client(s), v.status(), "pulled", pull, [&] { return SessionEnded(worker_id); });
    }
    if (!v.ok()) return v.status();
    if (*v != have) map_->Scatter(s, weights_[s], weights);
    have_[s] = *v;
    return absl::OkStatus();
  });
}

absl::StatusOr<uint64_t> ShardedPsClient::Pull(uint64_t worker_id, uint64_t have_version, const ModelLayout& layout,
                                               absl::Span<float> weights) {
  if (!map_.has_value()) return coordinator_->Pull(worker_id, have_version, layout, weights);
  const bool whole = !assembled_.has_value() || *assembled_ != have_version;  // the caller's model is another
  absl::StatusOr<uint64_t> v0 =
      coordinator_->Pull(worker_id, whole ? kNoVersion : have_[0], map_->slice_layout(0), absl::MakeSpan(weights_[0]));
  if (!v0.ok()) return v0.status();
  if (whole || *v0 != have_[0]) map_->Scatter(0, weights_[0], weights);
  have_[0] = *v0;
  if (absl::Status s = PullShards(worker_id, *v0, weights, whole); !s.ok()) return s;
  assembled_ = *v0;
  return *v0;
}

PushedStep ShardedPsClient::WithShardHold(const PushedStep& push) const {
  PushedStep out = push;
  out.step.shard_held_seconds = shard_held_seconds_;
  return out;
}

absl::StatusOr<PushReply> ShardedPsClient::Push(const PushedStep& step, const ModelLayout& layout,
                                                absl::Span<const float> gradient) {
  if (!map_.has_value()) return coordinator_->Push(step, layout, gradient);
  const PushedStep push = WithShardHold(step);
  if (gradient.empty()) return coordinator_->Push(push, map_->slice_layout(0), gradient);  // a report, an OOM
  std::vector<uint64_t> moved;
  return ReplyOfEverySlice(
      push,
      [&](int i, uint64_t*) {
        map_->Gather(i, gradient, absl::MakeSpan(gradient_[i]));
        return client(i)->Push(push, map_->slice_layout(i), gradient_[i]);
      },
      &moved);
}

absl::StatusOr<PushReply> ShardedPsClient::ReplyOfEverySlice(const PushedStep& push, const SliceCall& call,
                                                             std::vector<uint64_t>* moved) {
  const int n = map_->shards();
  moved->assign(n, kNoVersion);
  resent_.assign(n, false);
  std::vector<std::string> why(n);  // of each slice sent again
  std::vector<double> held(n, 0);
  PushReply reply;
  absl::Status s = ForEachSlice(n, [&](int i) -> absl::Status {
    absl::StatusOr<PushReply> r = call(i, &(*moved)[i]);
    if (!r.ok() && i > 0 && absl::IsUnavailable(r.status())) {
      (*moved)[i] = kNoVersion;  // its model, partly written or not at all, is pulled whole
      have_[i] = kNoVersion;
      resent_[i] = true;
      why[i] = absl::StrCat("slice ", i, " (", r.status().message(), ")");
      r = Resend(i, push, r.status());
    }
    if (!r.ok()) return r.status();
    held[i] = r->held_seconds;
    if (i == 0) reply = *r;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  shard_held_seconds_ = *std::max_element(held.begin() + 1, held.end());
  why.erase(std::remove(why.begin(), why.end(), ""), why.end());
  reply.resent = absl::StrJoin(why, ", ");
  return reply;
}

absl::StatusOr<PushReply> ShardedPsClient::Resend(int s, PushedStep push, const absl::Status& first) {
  push.resend = true;
  return CallAgain<PushReply>(
      *clock_, *client(s), first, "sent", [&] { return client(s)->Push(push, map_->slice_layout(s), gradient_[s]); },
      [&] { return SessionEnded(push.worker_id); });
}

bool ShardedPsClient::SessionEnded(uint64_t worker_id) {
  absl::StatusOr<Action> action = coordinator_->Heartbeat(worker_id);
  return action.ok() && *action == Action::kRejoin;
}

absl::StatusOr<PushReply> ShardedPsClient::PushPull(const PushedStep& step, const ModelLayout& layout,
                                                    absl::Span<const float> gradient, uint64_t* model_version,
                                                    absl::Span<float> weights) {
  if (!map_.has_value()) return coordinator_->PushPull(step, layout, gradient, model_version, weights);
  if (in_order_ && !gradient.empty()) {
    // One slice after the other: the streams' order (ShardedPushStream), every tensor at once.
    absl::StatusOr<std::unique_ptr<PushStream>> stream = StartPushPull(step, layout, gradient);
    if (!stream.ok()) return stream.status();
    std::vector<int> all(layout.tensors().size());
    std::iota(all.begin(), all.end(), 0);
    (*stream)->Send(all);
    return (*stream)->Finish(step.step.end, model_version, weights);
  }
  const PushedStep push = WithShardHold(step);
  std::vector<uint64_t> moved;  // the version a slice's reply brought, if any
  absl::StatusOr<PushReply> reply = ReplyOfEverySlice(
      push,
      [&](int i, uint64_t* v) {
        map_->Gather(i, gradient, absl::MakeSpan(gradient_[i]));
        absl::StatusOr<PushReply> r =
            client(i)->PushPull(push, map_->slice_layout(i), gradient_[i], v, absl::MakeSpan(weights_[i]));
        Timeline::Process().Mark("slice_reply", i);
        return r;
      },
      &moved);
  if (!reply.ok()) return reply.status();
  return Assemble(push, *reply, moved, model_version, weights);
}

absl::StatusOr<PushReply> ShardedPsClient::Assemble(const PushedStep& push, const PushReply& reply,
                                                    const std::vector<uint64_t>& moved, uint64_t* model_version,
                                                    absl::Span<float> weights) {
  const int n = map_->shards();
  if (reply.action != Action::kContinue || moved[0] == kNoVersion) return reply;  // the model did not move
  const uint64_t version = moved[0];
  if (std::all_of(moved.begin(), moved.end(), [version](uint64_t v) { return v == version; })) {
    for (int i = 0; i < n; ++i) map_->Scatter(i, weights_[i], weights);  // the usual sync round
    have_.assign(n, version);
    assembled_ = version;
    *model_version = version;
    return reply;
  }
  // Each slice that came at the coordinator's version goes in; the others are pulled at it.
  const bool same_model = assembled_.has_value() && *assembled_ == push.model_version;
  for (int i = 0; i < n; ++i) {
    if (moved[i] == version) {
      map_->Scatter(i, weights_[i], weights);
      have_[i] = version;
    } else if (!same_model || moved[i] != kNoVersion) {
      have_[i] = kNoVersion;  // its slice in the caller's model is not known to be current
    }
  }
  if (absl::Status p = PullShards(push.worker_id, version, weights, false); !p.ok()) return p;
  assembled_ = version;
  *model_version = version;
  return reply;
}

// One PushPull stream per slice (ShardedPsClient::StartPushPull). Used by one thread. In
// order (ShardMap.push_in_order), slice s + 1's gradient leaves only once slice s's is
// written with its trailer, slice 0's as backward finishes its tensors, the others' at the
// end; every slice's reply is read as soon as it comes.
class ShardedPushStream : public PushStream {
 public:
  ShardedPushStream(ShardedPsClient* client, PushedStep push, absl::Span<const float> gradient,
                    std::vector<std::unique_ptr<PushStream>> slices)
      : client_(client),
        push_(std::move(push)),
        gradient_(gradient),
        slices_(std::move(slices)),
        held_(slices_.size()),
        sent_(client_->pieces_.size(), false) {}

  void Send(const std::vector<int>& tensors) override {
    std::vector<std::vector<int>> by_slice(slices_.size());
    for (int t : tensors) {
      sent_[t] = true;
      for (const ShardedPsClient::PieceRef& p : client_->pieces_[t]) {
        std::memcpy(client_->gradient_[p.slice].data() + p.slice_offset, gradient_.data() + p.flat,
                    p.size * sizeof(float));
        by_slice[p.slice].push_back(p.index);
      }
    }
    for (size_t s = 0; s < slices_.size(); ++s) {
      if (by_slice[s].empty()) continue;
      if (client_->in_order_ && s > 0) {
        held_[s].insert(held_[s].end(), by_slice[s].begin(), by_slice[s].end());
      } else {
        slices_[s]->Send(by_slice[s]);
      }
    }
  }

  absl::StatusOr<PushReply> FinishEarly(const StepEnd& end, uint64_t* model_version,
                                        absl::Span<float> weights) override {
    // The tensors never sent (buffers, what backward did not reach) are the stream's to send
    // now: their pieces are gathered into the slices' buffers, which the slices' streams send.
    std::vector<int> rest;
    for (int t = 0; t < static_cast<int>(sent_.size()); ++t) {
      if (!sent_[t]) rest.push_back(t);
    }
    if (!rest.empty()) Send(rest);
    const int n = static_cast<int>(slices_.size());
    std::vector<absl::Notification> written(n);
    std::vector<uint64_t> moved;
    absl::StatusOr<PushReply> r = client_->ReplyOfEverySlice(
        push_,
        [&](int i, uint64_t* v) {
          if (client_->in_order_) {
            if (i > 0) written[i - 1].WaitForNotification();
            if (!held_[i].empty()) slices_[i]->Send(held_[i]);
            slices_[i]->CloseWrites(end);
            written[i].Notify();
          }
          absl::StatusOr<PushReply> r = slices_[i]->FinishEarly(end, v, absl::MakeSpan(client_->weights_[i]));
          Timeline::Process().Mark("slice_reply", i);
          return r;
        },
        &moved);
    if (!r.ok()) return r.status();
    const PushReply& reply = *r;
    weights_ = weights;
    if (reply.action != Action::kContinue || moved[0] == kNoVersion) return reply;  // nothing arrives
    if (std::any_of(moved.begin(), moved.end(), [&](uint64_t v) { return v != moved[0]; })) {
      // A slice came at another version (async: another worker's step reached it first):
      // the whole model now, every slice at least at the coordinator's version.
      if (absl::Status a = AwaitSlices(); !a.ok()) return a;
      return client_->Assemble(push_, reply, moved, model_version, weights);
    }
    client_->have_.assign(n, moved[0]);  // the usual round: every slice at one version, arriving
    client_->assembled_ = moved[0];
    *model_version = moved[0];
    arriving_ = true;
    placed_.assign(n, {});
    for (int i = 0; i < n; ++i) placed_[i].assign(client_->map_->slice(i).size(), false);
    return reply;
  }

  bool AwaitTensor(int t) override {
    if (!arriving_) return true;
    for (const ShardedPsClient::PieceRef& p : client_->pieces_[t]) {
      if (placed_[p.slice][p.index]) continue;
      if (!slices_[p.slice]->AwaitTensor(p.index)) return false;
      std::memcpy(weights_.data() + p.flat, client_->weights_[p.slice].data() + p.slice_offset, p.size * sizeof(float));
      placed_[p.slice][p.index] = true;
    }
    return true;
  }

  absl::Status AwaitModel() override {
    if (absl::Status s = AwaitSlices(); !s.ok()) return s;
    if (arriving_) {
      // Every piece AwaitTensor has not placed yet (the others are in already).
      for (int t = 0; t < static_cast<int>(client_->pieces_.size()); ++t) (void)AwaitTensor(t);
      arriving_ = false;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status AwaitSlices() {
    absl::Status first;
    for (size_t i = 0; i < slices_.size(); ++i) {
      if (i < client_->resent_.size() && client_->resent_[i]) continue;  // its stream broke: pulled instead
      absl::Status a = slices_[i]->AwaitModel();
      if (first.ok() && !a.ok()) first = a;
    }
    return first;
  }

  ShardedPsClient* client_;
  const PushedStep push_;
  absl::Span<const float> gradient_;
  std::vector<std::unique_ptr<PushStream>> slices_;
  std::vector<std::vector<int>> held_;     // in order: slice s's tensors, sent in its turn
  std::vector<bool> sent_;                 // per model tensor: given to Send
  absl::Span<float> weights_;              // the caller's model, after FinishEarly
  bool arriving_ = false;                  // the slices' models are on their way
  std::vector<std::vector<bool>> placed_;  // pieces already in weights_
};

absl::StatusOr<std::unique_ptr<PushStream>> ShardedPsClient::StartPushPull(const PushedStep& step,
                                                                           const ModelLayout& layout,
                                                                           absl::Span<const float> gradient) {
  if (!map_.has_value()) return coordinator_->StartPushPull(step, layout, gradient);
  const PushedStep push = WithShardHold(step);
  std::vector<std::unique_ptr<PushStream>> slices;
  for (int i = 0; i < map_->shards(); ++i) {
    absl::StatusOr<std::unique_ptr<PushStream>> s = client(i)->StartPushPull(push, map_->slice_layout(i), gradient_[i]);
    if (!s.ok()) return s.status();  // the streams opened so far cancel as they go
    slices.push_back(*std::move(s));
  }
  return std::unique_ptr<PushStream>(new ShardedPushStream(this, push, gradient, std::move(slices)));
}

}  // namespace worker
}  // namespace omnilearn
