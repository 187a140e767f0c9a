#include "worker/client/session.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/client/timeline.h"

namespace omnilearn {
namespace worker {

Session::Session(PsClient* client, ModelLayout layout, SessionOptions options)
    : client_(client), layout_(std::move(layout)), options_(std::move(options)), jitter_(options_.jitter_seed) {}

Session::~Session() { StopHeartbeats(); }

void Session::StopHeartbeats() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  if (heartbeat_.joinable()) heartbeat_.join();
}

void Session::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::printf("[%s] %s\n", options_.worker.name.c_str(), line.c_str());
    std::fflush(stdout);
  }
}

bool Session::Transient(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsCancelled(s);
}

absl::Status Session::TryJoin(absl::Span<const float> weights) {
  JoinRequest request;
  request.worker = options_.worker;
  // A live session of ours (after a network fault) is replaced: proven by its secret.
  request.resume_worker_id = id_.load();
  request.resume_secret = secret_;
  absl::StatusOr<JoinReply> r = client_->Join(request, layout_, {});
  // The server asks for our model (it has none we may train): bring it. A server of an
  // earlier release asks with FAILED_PRECONDITION.
  if ((r.ok() && r->send_model) || absl::IsFailedPrecondition(r.status())) {
    request.has_initial_parameters = true;
    r = client_->Join(request, layout_, weights);
    if (r.ok() && r->send_model) return absl::InternalError("the server asked for the model it was just sent");
  }
  if (!r.ok()) return r.status();
  if (r->action == Action::kStop) {
    stop_.store(true);
    global_samples_ = r->global_samples;
    if (r->job_finished) {
      Log(
          absl::StrFormat("the job on this server is finished (model version %d, %d samples trained): nothing to "
                          "train (a new job needs a new server, or one run with --reset_when_done)",
                          r->finished_version, r->global_samples));
    }
    return absl::OkStatus();
  }
  id_.store(r->worker_id);
  secret_ = r->session_secret;
  client_->SetSessionSecret(secret_);
  lease_ms_.store(std::max<int64_t>(100, static_cast<int64_t>(r->lease_seconds * 1000)));
  batch_ = r->batch_size;
  samples_ = std::move(r->samples);
  idle_ = r->idle;
  global_samples_ = r->global_samples;
  mode_ = r->mode;
  local_steps_ = r->local_steps;
  local_batch_ = r->local_batch;
  push_trailer_ = r->push_trailer;
  version_ = ~0ull;  // whatever we hold, pull the server's model
  rejoin_.store(false);
  return absl::OkStatus();
}

namespace {

// gRPC's resolver says so when the server's name does not resolve: no wait helps then.
bool NameDoesNotResolve(const absl::Status& s) {
  return absl::IsUnavailable(s) && absl::StrContains(s.message(), "DNS resolution failed");
}

absl::Status NeverReached(const absl::Status& last, absl::Duration window, const std::string& hint) {
  const std::string where = hint.empty() ? "" : absl::StrCat(" (", hint, ")");
  if (NameDoesNotResolve(last)) {
    return absl::UnavailableError(absl::StrCat("the server's address does not resolve (", last.message(),
                                               "): check the server's host name", where));
  }
  return absl::UnavailableError(absl::StrFormat(
      "never reached the server within %.0f s (last error: %s): check the server's address and that it is running%s",
      absl::ToDoubleSeconds(window), last.ToString(), where));
}

}  // namespace

absl::Status Session::JoinUntilBack(absl::Span<const float> weights, const absl::Status& cause) {
  const Clock& clock = *options_.clock;
  const absl::Time start = clock.Now();
  // Until a first join worked the server may be nowhere: a short window, unless it
  // answered that our name is still another session's (this process restarted before
  // the old session's lease ran out): that ends by waiting, within the reconnect window.
  bool never_reached = !joined_once_;
  absl::Time next_note = start;
  absl::Duration backoff = options_.backoff_initial;
  absl::Status last = cause;
  for (int attempt = 0;; ++attempt) {
    if (options_.interrupted != nullptr && options_.interrupted->load()) {
      return absl::CancelledError("interrupted while waiting for the server");
    }
    const absl::Duration window =
        never_reached ? std::min(options_.connect_timeout, options_.reconnect_timeout) : options_.reconnect_timeout;
    if (attempt > 0 || Transient(cause)) {
      const absl::Time now = clock.Now();
      if (now - start >= window) {
        if (never_reached) return NeverReached(last, window, options_.server_hint);
        if (absl::IsAlreadyExists(last)) {
          return absl::AlreadyExistsError(
              absl::StrFormat("our name stayed another live session's for %.0f s (%s): two workers share a --name?",
                              absl::ToDoubleSeconds(window), last.message()));
        }
        return absl::UnavailableError(absl::StrFormat("the server did not come back within %.0f s (last error: %s)",
                                                      absl::ToDoubleSeconds(window), last.ToString()));
      }
      if (now >= next_note) {
        Log(absl::StrFormat(absl::IsAlreadyExists(last)
                                ? "our name is still another session's on the server (this worker restarted before "
                                  "its old session ended; %s): waiting for up to %.0f s more"
                                : "waiting for the server (%s): retrying for up to %.0f s more",
                            last.ToString(), absl::ToDoubleSeconds(window - (now - start))));
        next_note = now + absl::Seconds(10);
      }
      // Full jitter between half and all of the backoff keeps restarted fleets apart.
      std::uniform_real_distribution<double> spread(0.5, 1.0);
      PauseBeforeRetry(clock, *client_, backoff * spread(jitter_));
      backoff = std::min(options_.backoff_max, backoff * 2);
    }
    last = TryJoin(weights);
    if (last.ok()) break;
    if (absl::IsAlreadyExists(last)) {
      never_reached = false;  // it answered: the old session's lease ends it
      continue;
    }
    if (!Transient(last)) return last;
    if (never_reached && NameDoesNotResolve(last)) return NeverReached(last, window, options_.server_hint);
  }
  if (stop_.load()) return absl::OkStatus();  // the server is shutting down
  if (joined_once_) {
    ++rejoins_;
    Log(absl::StrFormat("rejoined as worker %d after %.1f s: batch %d, %d samples trained so far", id_.load(),
                        absl::ToDoubleSeconds(clock.Now() - start), batch_, global_samples_));
  }
  joined_once_ = true;
  if (options_.heartbeats && !heartbeat_.joinable()) heartbeat_ = std::thread([this] { HeartbeatLoop(); });
  return absl::OkStatus();
}

absl::Status Session::Join(absl::Span<const float> weights) { return JoinUntilBack(weights, absl::OkStatus()); }

absl::StatusOr<bool> Session::Pull(absl::Span<float> weights) {
  if (absl::Status s = AwaitModel(); !s.ok()) return s;
  while (true) {
    absl::StatusOr<uint64_t> v = client_->Pull(id_.load(), version_, layout_, weights);
    if (v.ok()) {
      const bool changed = *v != version_;
      version_ = *v;
      return changed;
    }
    version_ = ~0ull;  // the weights may be partly written
    if (!absl::IsNotFound(v.status()) && !Transient(v.status())) return v.status();
    if (absl::Status s = JoinUntilBack(weights, v.status()); !s.ok()) return s;
    if (stop_.load()) return false;  // the server is shutting down: the next push learns it
  }
}

absl::StatusOr<PushOutcome> Session::Push(const StepReport& step, absl::Span<const float> gradient,
                                          absl::Span<const float> weights, PushReply* reply) {
  if (absl::Status s = AwaitModel(); !s.ok()) return s;
  return Send(step, weights, reply, [&](const PushedStep& p) { return client_->Push(p, layout_, gradient); });
}

absl::StatusOr<PushOutcome> Session::PushPull(const StepReport& step, absl::Span<const float> gradient,
                                              absl::Span<float> weights, PushReply* reply, bool* changed) {
  *changed = false;
  if (absl::Status s = AwaitModel(); !s.ok()) return s;
  uint64_t version = version_;
  absl::StatusOr<PushOutcome> outcome = Send(step, weights, reply, [&](const PushedStep& p) {
    return client_->PushPull(p, layout_, gradient, &version, weights);
  });
  Received(outcome, version, changed);
  return outcome;
}

void Session::Received(const absl::StatusOr<PushOutcome>& outcome, uint64_t version, bool* changed) {
  *changed = false;
  if (outcome.ok() && *outcome == PushOutcome::kReplied) {
    *changed = version != version_;
    version_ = version;
  } else if (!outcome.ok()) {
    version_ = ~0ull;  // the weights may be partly written: the next pull brings the whole model
  }
}

absl::StatusOr<PushOutcome> Session::Idle(absl::Span<float> weights, PushReply* reply, bool* changed) {
  *changed = false;
  if (absl::Status s = AwaitModel(); !s.ok()) return s;
  StepReport step;
  step.idle = true;
  absl::StatusOr<PushOutcome> outcome =
      Send(step, weights, reply, [&](const PushedStep& p) { return client_->Push(p, layout_, {}); });
  if (!outcome.ok() || *outcome != PushOutcome::kReplied) return outcome;
  absl::StatusOr<bool> pulled = Pull(weights);
  if (!pulled.ok()) return pulled.status();
  *changed = *pulled;
  return stop_.load() ? PushOutcome::kStop : PushOutcome::kReplied;
}

void StreamedPush::Ready(int tensor) {
  if (stream_ == nullptr) return;
  absl::MutexLock lock(&mu_);
  std::vector<int> whole = buckets_.Ready(tensor);
  if (whole.empty()) return;
  stream_->Send(whole);
  Timeline::Process().Mark("bucket");
}

std::unique_ptr<StreamedPush> Session::BeginPushPull(const StepReport& step, absl::Span<const float> gradient,
                                                     int64_t bucket_bytes) {
  // A step's end is known here only when its gradient is whole (its compute then is over).
  Timeline::Process().Begin(pushes_sent_ + 1, absl::Seconds(step.end.compute_seconds));
  std::unique_ptr<StreamedPush> push(
      new StreamedPush(PushedStep{id_.load(), version_, step}, gradient, layout_, bucket_bytes));
  if (bucket_bytes <= 0 || !push_trailer_ || stop_.load() || rejoin_.load()) return push;
  absl::StatusOr<std::unique_ptr<PushStream>> stream = client_->StartPushPull(push->push_, layout_, gradient);
  if (stream.ok()) push->stream_ = std::move(*stream);  // else the gradient goes whole at the end
  return push;
}

absl::StatusOr<PushOutcome> Session::FinishPushPull(std::unique_ptr<StreamedPush> push, const StepEnd& end,
                                                    absl::Span<float> weights, PushReply* reply, bool* changed,
                                                    bool early) {
  *changed = false;
  Timeline::Process().Mark("finish");
  const uint64_t session = push->push_.worker_id;
  if (absl::Status s = AwaitModel(); !s.ok()) return s;
  if (id_.load() != session) {
    // Rejoined since the push began (the last model's stream broke and its pull had to
    // join again): the header's batch and the gradient are of the old session and model.
    return PushOutcome::kRejoined;
  }
  if (push->stream_ == nullptr) {  // never opened: the push goes whole now
    push->push_.step.end = end;
    absl::StatusOr<PushOutcome> outcome = PushPull(push->push_.step, push->gradient_, weights, reply, changed);
    Timeline::Process().Mark("reply");
    return outcome;
  }
  uint64_t version = version_;
  ++pushes_sent_;
  std::unique_ptr<PushStream> stream = std::move(push->stream_);
  absl::StatusOr<PushReply> r = stream->FinishEarly(end, &version, weights);
  Timeline::Process().Mark("reply");
  if (r.ok()) {
    arriving_ = std::move(stream);  // the model's values, still on their way
    arriving_into_ = weights;
  }
  absl::StatusOr<PushOutcome> outcome = Settle(std::move(r), weights, reply);
  if (!outcome.ok() || *outcome != PushOutcome::kReplied) {
    (void)AwaitModel();  // none was due
    Received(outcome, version, changed);
    return outcome;
  }
  Received(outcome, version, changed);  // the version the arriving model will hold
  if (early) return outcome;
  const uint64_t arriving = version_;
  if (absl::Status m = AwaitModel(); !m.ok()) return m;
  if (id_.load() != session) return PushOutcome::kRejoined;  // its stream broke; the pull joined again
  if (version_ != arriving) *changed = true;                 // its stream broke; pulled whole instead
  return outcome;
}

void Session::AwaitTensor(int t) {
  if (arriving_ != nullptr) Timeline::Process().Time("forward_wait", [&] { (void)arriving_->AwaitTensor(t); });
}

absl::Status Session::AwaitModel() {
  if (arriving_ == nullptr) return absl::OkStatus();
  const absl::Status s = arriving_->AwaitModel();
  arriving_.reset();
  if (s.ok()) return s;
  version_ = ~0ull;  // partly written: the whole model again
  absl::StatusOr<bool> pulled = Pull(arriving_into_);
  return pulled.status();
}

template <typename Call>
absl::StatusOr<PushOutcome> Session::Send(const StepReport& step, absl::Span<const float> weights, PushReply* reply,
                                          Call call) {
  if (stop_.load()) return PushOutcome::kStop;
  if (rejoin_.load()) {  // the heartbeat learnt the session is gone
    if (absl::Status s = JoinUntilBack(weights, absl::NotFoundError("the server asked to rejoin")); !s.ok()) return s;
    return PushOutcome::kRejoined;
  }
  ++pushes_sent_;
  return Settle(call(PushedStep{id_.load(), version_, step}), weights, reply);
}

absl::StatusOr<PushOutcome> Session::Settle(absl::StatusOr<PushReply> r, absl::Span<const float> weights,
                                            PushReply* reply) {
  if (!r.ok()) {
    if (!absl::IsNotFound(r.status()) && !Transient(r.status())) return r.status();
    if (absl::Status s = JoinUntilBack(weights, r.status()); !s.ok()) return s;
    return stop_.load() ? PushOutcome::kStop : PushOutcome::kRejoined;
  }
  ++pushes_answered_;
  *reply = std::move(*r);
  if (!reply->resent.empty()) Log("sent again on the same session after a transport error: " + reply->resent);
  global_samples_ = std::max(global_samples_, reply->global_samples);
  if (reply->action == Action::kStop) {
    stop_.store(true);
    return PushOutcome::kStop;
  }
  if (reply->action == Action::kRejoin) {
    if (absl::Status s = JoinUntilBack(weights, absl::NotFoundError("the server asked to rejoin")); !s.ok()) return s;
    return PushOutcome::kRejoined;
  }
  if (reply->next_batch_size > 0) batch_ = reply->next_batch_size;
  if (!reply->samples.empty() || reply->idle) {
    samples_ = reply->samples;
    idle_ = reply->idle;
  }
  return PushOutcome::kReplied;
}

void Session::Leave(bool finished) {
  arriving_.reset();  // a model still arriving is of no use now
  StopHeartbeats();   // a departed session sends nothing more
  if (id_.load() != 0) (void)client_->Leave(id_.load(), finished);
}

void Session::HeartbeatLoop() {
  const Clock& clock = options_.heartbeat_clock != nullptr ? *options_.heartbeat_clock : *options_.clock;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time next = clock.Now() + absl::Milliseconds(lease_ms_.load() / 3);
      if (clock.AwaitWithDeadline(mu_, absl::Condition(&closing_), next)) return;
    }
    const uint64_t id = id_.load();
    absl::StatusOr<Action> action = client_->Heartbeat(id);
    if (!action.ok()) continue;  // outages are the training thread's to handle
    if (*action == Action::kStop) stop_.store(true);
    // Only about the session it asked for: the training thread may have rejoined since.
    if (*action == Action::kRejoin && id_.load() == id) rejoin_.store(true);
  }
}

}  // namespace worker
}  // namespace omnilearn
