// The worker's side of the protocol as a small state machine: join, pull, push,
// heartbeats, rejoin, reconnect, leave. Torch-free, so it is tested with a fake client.
//
// Faults it rides out:
// - UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED (server down, restarting, unreachable):
//   capped exponential backoff with jitter, joining again, for up to reconnect_timeout
//   counted from the start of the outage; one line when it starts and one every
//   10 s of it, saying what it waits for. A server never reached (the first join) gets a
//   short window instead (connect_timeout; none when its name does not resolve): a wrong
//   address is an error within seconds, not after the long wait kept for a lost server.
// - NOT_FOUND and ACTION_REJOIN (lease expired, server restarted): joins again at once
//   under the same name.
// A join sends the worker's parameters only to a server that has no model (it first asks
// without them), so a server restored from a checkpoint keeps its model. After any
// rejoin the caller pulls and recomputes: a gradient of the old session is dropped.
#ifndef OMNILEARN_WORKER_CLIENT_SESSION_H_
#define OMNILEARN_WORKER_CLIENT_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/model_layout.h"
#include "worker/client/ps_client.h"
#include "worker/client/ps_types.h"
#include "worker/client/push_buckets.h"

namespace omnilearn {
namespace worker {

struct SessionOptions {
  WorkerInfo worker;                                      // who joins (the layout is the session's)
  absl::Duration reconnect_timeout = absl::Seconds(300);  // per outage, once joined
  // A server never reached yet (a wrong address, or not started): the first join gives up
  // after this (at most reconnect_timeout), and at once when the address does not resolve.
  absl::Duration connect_timeout = absl::Seconds(10);
  // How the user named the server, added to the error for one never reached (e.g.
  // "--server=HOST:PORT"): the address to check, in the caller's own terms.
  std::string server_hint;
  absl::Duration backoff_initial = absl::Milliseconds(200);
  absl::Duration backoff_max = absl::Seconds(2);
  bool heartbeats = true;              // a background thread calls Heartbeat every lease / 3
  const Clock* clock = Clock::Real();  // backoff and outage times (the caller's thread)
  // The heartbeat thread's clock; null: `clock`. (Python workers back off on a clock of
  // Python's, which only threads holding the interpreter may call.)
  const Clock* heartbeat_clock = nullptr;
  uint64_t jitter_seed = 0;
  // Where event lines go (joined, rejoined, waiting for the server); default stdout.
  std::function<void(const std::string&)> log;
  // Set (e.g. by a signal) to give up waiting for the server: Join and the reconnect
  // loop return Cancelled. Not owned; null = never.
  const std::atomic<bool>* interrupted = nullptr;
};

// What a push came to.
enum class PushOutcome {
  kReplied,   // the server answered; see the reply
  kRejoined,  // the session was re-established: pull and train the iteration again
  kStop,      // the server said stop (training over or server shutting down)
};

// A PushPull begun before its gradient is complete (Session::BeginPushPull): backward
// tells it each tensor it made final, and whole buckets leave while backward goes on.
// Ready may be called from autograd's threads.
class StreamedPush {
 public:
  // Tensor `tensor` (layout index) of the gradient is final (unchanged from now on).
  void Ready(int tensor);
  // Whether the gradient leaves during backward (else whole, at FinishPushPull).
  bool streaming() const { return stream_ != nullptr; }

 private:
  friend class Session;
  StreamedPush(PushedStep push, absl::Span<const float> gradient, const ModelLayout& layout, int64_t bucket_bytes)
      : push_(std::move(push)), gradient_(gradient), buckets_(layout, bucket_bytes) {}

  PushedStep push_;
  absl::Span<const float> gradient_;
  absl::Mutex mu_;
  PushBuckets buckets_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PushStream> stream_;  // null: the gradient goes whole at the end
};

// Thread-compatible for the training thread; the heartbeat thread is its own.
class Session {
 public:
  // `client` must outlive the session.
  Session(PsClient* client, ModelLayout layout, SessionOptions options);
  ~Session();

  // Model buffers (`weights`, `gradient`) are flat float32 in layout order, in the
  // caller's memory. A model is received in place: a stream that breaks part way leaves
  // `weights` partly written, and the session then holds no version (the next pull
  // brings the whole model).
  //
  // Joins; `weights` (the model's current values) are sent only when the server has
  // no model yet. A server that is shutting down, or whose job is finished (said in a
  // line), answers stop: OK with stop_requested() set. Errors: anything not transient (InvalidArgument for another
  // model, AlreadyExists for a name in use...), the server unreachable for longer than
  // reconnect_timeout, Cancelled when interrupted.
  absl::Status Join(absl::Span<const float> weights);
  // Brings `weights` to the server's current model if it moved (true then).
  absl::StatusOr<bool> Pull(absl::Span<float> weights);
  // Pushes `gradient` with its step (the session adds the worker id and model version).
  // `weights` are the model the worker holds, for a rejoin with a server that lost its own.
  absl::StatusOr<PushOutcome> Push(const StepReport& step, absl::Span<const float> gradient,
                                   absl::Span<const float> weights, PushReply* reply);
  // Push, then the model, in one round trip (PushPull): on kReplied `weights` holds the
  // server's current model and `*changed` says whether it moved. Otherwise as Push.
  absl::StatusOr<PushOutcome> PushPull(const StepReport& step, absl::Span<const float> gradient,
                                       absl::Span<float> weights, PushReply* reply, bool* changed);
  // PushPull in two halves around backward. Begin opens the push of `step` (its end
  // still unknown) for `gradient` (which backward fills in; the caller keeps it until
  // Finish returns): with bucket_bytes > 0 and a server that reads trailers, the step
  // leaves now and each bucket (of about bucket_bytes, push_buckets.h) once
  // StreamedPush::Ready made it whole. Finish sends the rest and the step's end (compute
  // time, loss, accuracy) and receives as PushPull; without a stream it is PushPull of the
  // whole step. Dropping a begun push unfinished (out of memory, an exception) cancels
  // it: the server changes nothing.
  std::unique_ptr<StreamedPush> BeginPushPull(const StepReport& step, absl::Span<const float> gradient,
                                              int64_t bucket_bytes);
  //
  // `early` (a streamed push only): Finish returns once the reply is in and the model keeps
  // arriving into `weights` in the server's order (small buffers, then layout order), so the
  // next forward can start on the first layers (AwaitTensor); `*changed` then says the model
  // will have moved. Every other call of the session except BeginPushPull and
  // StreamedPush::Ready waits for the rest first (AwaitModel).
  absl::StatusOr<PushOutcome> FinishPushPull(std::unique_ptr<StreamedPush> push, const StepEnd& end,
                                             absl::Span<float> weights, PushReply* reply, bool* changed,
                                             bool early = false);
  // A worker with no samples to train (idle()): tells the server it waits (in a sync job
  // it is present in the round of the model it holds), then brings `weights` to the
  // server's model. kReplied: the reply's samples, if any, are the next step's, and
  // `*changed` says whether the model moved; otherwise as Push.
  absl::StatusOr<PushOutcome> Idle(absl::Span<float> weights, PushReply* reply, bool* changed);
  // Waits until tensor `t` of a model still arriving is in place (at once when none is).
  void AwaitTensor(int t);
  // Waits for the rest of a model still arriving; when its stream broke, pulls the model
  // whole (riding out the outage as Pull does). Errors as Pull's.
  absl::Status AwaitModel();
  // Best effort: tells the server this worker is gone (`finished`: it completed its
  // training).
  void Leave(bool finished);
  // Ends and joins the heartbeat thread, if any (Leave and the destructor do too).
  void StopHeartbeats();
  // Whether a heartbeat thread runs (from the first join until StopHeartbeats or Leave).
  bool heartbeats_running() const { return heartbeat_.joinable(); }

  uint64_t worker_id() const { return id_.load(); }
  int64_t batch() const { return batch_; }
  // The samples the server assigned for the next mini-batch (empty when the server
  // does not assign them: the worker picks its own).
  const Assignment& samples() const { return samples_; }
  // The job's samples are all handed out and none is ours: train nothing, call Idle.
  bool idle() const { return idle_; }
  uint64_t model_version() const { return version_; }
  uint64_t global_samples() const { return global_samples_; }
  std::optional<Mode> mode() const { return mode_; }
  // > 1: the job's local steps (JoinReply::local_steps): each batch is that many steps.
  int local_steps() const { return local_steps_; }
  int64_t local_batch() const { return local_batch_; }  // > 0: steps of this many samples (instead)
  bool stop_requested() const { return stop_.load(); }
  int rejoins() const { return rejoins_; }
  // Pushes sent (every call, report-only ones too) and the ones the server answered (a
  // reply, whatever it said): the server counts exactly the answered ones by result.
  uint64_t pushes_sent() const { return pushes_sent_; }
  uint64_t pushes_answered() const { return pushes_answered_; }

 private:
  static bool Transient(const absl::Status& s);
  // Joins once: without parameters, then with them if the server has no model.
  absl::Status TryJoin(absl::Span<const float> weights);
  // Joins until it works, a non-transient error, or reconnect_timeout.
  absl::Status JoinUntilBack(absl::Span<const float> weights, const absl::Status& cause);
  void HeartbeatLoop();
  // A push of `step` by `call` (given the whole PushedStep), with the replies' and
  // faults' handling.
  template <typename Call>
  absl::StatusOr<PushOutcome> Send(const StepReport& step, absl::Span<const float> weights, PushReply* reply,
                                   Call call);
  // A push's answer (or failure) acted upon: rejoin, stop, the next batch and samples.
  absl::StatusOr<PushOutcome> Settle(absl::StatusOr<PushReply> r, absl::Span<const float> weights, PushReply* reply);
  // After a PushPull: the version the weights now hold.
  void Received(const absl::StatusOr<PushOutcome>& outcome, uint64_t version, bool* changed);
  void Log(const std::string& line) const;

  PsClient* const client_;
  const ModelLayout layout_;
  const SessionOptions options_;
  std::mt19937_64 jitter_;
  std::atomic<uint64_t> id_{0};
  std::atomic<int64_t> lease_ms_{60000};
  int64_t batch_ = 0;
  std::string secret_;  // the session's (the client sends it with every call)
  Assignment samples_;
  bool idle_ = false;
  uint64_t version_ = ~0ull;  // the version `weights` hold; ~0 = none yet
  uint64_t global_samples_ = 0;
  std::optional<Mode> mode_;
  int local_steps_ = 1;
  int64_t local_batch_ = 0;
  int rejoins_ = 0;
  uint64_t pushes_sent_ = 0, pushes_answered_ = 0;
  bool joined_once_ = false;
  bool push_trailer_ = false;             // the server reads PushTrailers (streamed pushes)
  std::unique_ptr<PushStream> arriving_;  // a PushPull whose model is still arriving
  absl::Span<float> arriving_into_;       // ...into these weights
  std::atomic<bool> stop_{false};
  std::atomic<bool> rejoin_{false};

  absl::Mutex mu_;  // for the heartbeat thread's wait
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread heartbeat_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_SESSION_H_
