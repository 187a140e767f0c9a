// A shard server's data plane (docs/SHARDING.md): one slice of the model, its optimizer
// state, the workers' pending slices of gradient, and the steps the coordinator decided,
// replayed in its order. It decides nothing itself: which workers' gradients a step takes,
// with which weights and rate, comes from the coordinator (ReplicatedStep), so every
// shard moves to the same version from the same pushes.
#ifndef OMNILEARN_SERVER_DATA_SHARD_CORE_H_
#define OMNILEARN_SERVER_DATA_SHARD_CORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "server/checkpoint/checkpoint.h"
#include "server/control/data_plane.h"
#include "server/data/arrival_sum.h"
#include "server/data/parameter_store.h"
#include "server/data/replicated_step.h"

namespace omnilearn {
namespace server {

struct ShardCoreOptions {
  const Clock* clock = Clock::Real();           // not owned
  std::function<void(const std::string&)> log;  // null = silent
};

// Thread-safe: the control stream's thread calls Init, the session calls and Step; the
// gRPC threads call the DataPlane methods.
class ShardCore : public DataPlane {
 public:
  explicit ShardCore(ShardCoreOptions options);

  // The slice, its first values and the optimizer (whose rate each step brings: the
  // options' learning_rate and schedule are not used). `member_wait` bounds how long a
  // step waits for a member's slice. FailedPrecondition when a step was taken already
  // (the slice's training would be lost); InvalidArgument on sizes or values.
  absl::Status Init(ModelLayout slice, std::vector<float> values, uint64_t version, OptimizerOptions optimizer,
                    absl::Duration member_wait, bool sync = true);
  // The slice from its checkpoint (the job went back to a common checkpoint): weights,
  // optimizer state and version, whatever the slice held before. The pushes waiting are
  // answered (not applied) and the sessions forgotten: the workers join again.
  // InvalidArgument when the checkpoint is not of `slice`'s layout.
  absl::Status Restore(const ModelLayout& slice, const CheckpointState& checkpoint, OptimizerOptions optimizer,
                       absl::Duration member_wait, bool sync);
  // The coordinator's job ended and another begins (--reset_when_done): the sessions and the
  // pushes waiting end (their calls answer as for a closed session), and the next Init
  // replaces the slice whatever its version.
  void EndJob();
  // The slice as a checkpoint holds it (weights and optimizer state shared, not copied);
  // FailedPrecondition before the slice's first values.
  absl::StatusOr<CheckpointState> Capture() const;
  // The slice at `version` as a checkpoint holds it: as it is, or as it was before the step
  // it took ahead from `version` (kept until the coordinator's command confirms that step).
  // FailedPrecondition when the slice is at another version.
  absl::StatusOr<CheckpointState> CaptureAt(uint64_t version) const;
  bool initialized() const;
  void OpenSession(WorkerId id, std::string secret);
  void CloseSession(WorkerId id);
  // Whether the coordinator announced session `id` (and did not close it), without waiting.
  bool HasSession(WorkerId id) const;
  // Takes the step on this slice once every member's slice for its model version is here.
  // Past member_wait without one: sync, the step is not taken and fails Aborted (the
  // coordinator's slice took that member: the shard registers again and every slice goes
  // back to the common checkpoint, so that all slices stay one model); async, it is taken
  // with the members that came (the others' weights left out, and logged). Either way a
  // member whose slice did not come is dropped like a late worker, its session ended on
  // this shard (its next call is refused NotFound: it joins again), and no later step
  // waits for it. FailedPrecondition when the slice is not at step.version (a step
  // missed).
  //
  // A clipped job (the optimizer's clip_grad_norm > 0): the step's update is scaled down to
  // the clip by the whole model's norm, which the norm reduction gives from this slice's
  // part (the coordinator's ServerPeers.StepNorm); when it fails, the step fails Aborted (the
  // shard registers again and the job goes back to the common checkpoint).
  //
  // A step this slice took ahead (ExpectRound) is confirmed instead: OK when it is this
  // step, Aborted when the coordinator's took other members or scalars (the shard registers
  // again and the job goes back to its common checkpoint).
  absl::Status Step(const ReplicatedStep& step);
  // Sync: the coordinator's next round decided ahead of its data (--shard_steps_ahead). Once
  // every one of its members' slices of `round.version` is here, the slice steps at once,
  // on the thread whose slice came last (this one, when they all came first), and its
  // model leaves without waiting for the coordinator's command. Ignored in async, or when
  // the slice is not at round.version (a step missed: the command decides).
  void ExpectRound(RoundAhead round);
  // The whole update's squared norm from this slice's part of the step leaving `version`.
  using NormReduction = std::function<absl::StatusOr<double>(uint64_t version, double sum_squares)>;
  // Set before the first step of a clipped job (the shard's link sets it from the init).
  void SetNormReduction(NormReduction reduction);
  uint64_t version() const;
  // Wakes every waiting call; later pulls answer Unavailable.
  void Shutdown();

  // How long a call waits for its session to be announced (Authenticate).
  static constexpr absl::Duration kAnnouncementWait = absl::Seconds(2);

  // DataPlane. Authenticate waits up to kAnnouncementWait for a session the coordinator
  // has not announced yet (its command may be behind the worker's first call); a session
  // still unknown then is refused NotFound, before anything of its call is read. A push keeps the
  // worker's slice until a step takes it (one per worker: a newer push replaces it) and
  // answers then (applied), or when a sync step of its version was taken without it, or
  // at the deadline or member_wait (not applied); NotFound for a session the coordinator
  // has not announced (or closed), InvalidArgument for a size or a non-finite value. A pull
  // waits for min_version until the deadline, unless its session ends meanwhile (a
  // restore, a drop): NotFound then, so the worker joins again at once. A resent push
  // (PushInfo::resend) whose first sending a step took already is answered applied at once.
  absl::Status Authenticate(WorkerId id, absl::string_view secret) const override;
  absl::StatusOr<PushResult> Push(const PushInfo& info, std::vector<float> gradient, absl::Time deadline) override;
  absl::StatusOr<ModelSnapshot> Pull(WorkerId id, uint64_t have_version, uint64_t min_version,
                                     absl::Time deadline) override;
  absl::StatusOr<ModelLayout> Layout() const override;
  BufferPool& buffers() override { return buffers_; }
  const Clock& clock() const override { return *options_.clock; }
  void Log(const std::string& line) const override {
    if (options_.log) options_.log(line);
  }
  void CountRejectedPush(WorkerId, const std::string&) override {}
  void CountUnauthenticated() override { unauthenticated_.Increment(); }
  void CountPushBytes(int64_t bytes) override;
  void CountPullBytes(int64_t bytes) override;
  // The shard's /metrics: calls refused for their credentials, bytes in and out, the
  // slice's size and version, each step's latency (from the coordinator's command to the
  // slice stepped, the wait for the members' slices included), the members' slices a step
  // went without, and the steps whose sum was built as the slices arrived, and the steps
  // taken ahead of the command.
  metrics::Registry& registry() { return registry_; }
  // "120 steps took slices, which were in 23.1 ms on average before the coordinator's
  // command" (omnilearn_shard_step_command_wait_seconds), and how many were taken ahead of
  // it, for the shard's last log line.
  std::string StepWaitSummary() const;

 private:
  static absl::Status NoSession(WorkerId id);
  // A capture of the slice with this shard's mode and the time.
  CheckpointState Stamped(CheckpointState s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The store an Init or a Restore built, in place of the slice held so far.
  void Install(std::unique_ptr<ParameterStore> store, absl::Duration member_wait, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A clipped job's step: the whole update's squared norm, reduced from the slice's part,
  // scale * `sum` (nullopt when the job does not clip).
  absl::StatusOr<std::optional<double>> NormToClipBy(uint64_t version, const std::vector<float>& sum, double scale)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sync: adds a push's slice of the slice's current version to the step's sum as it
  // arrives (ArrivalSum), the lock released meanwhile.
  void AddOnArrival(const PushInfo& info, const std::vector<float>& gradient) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A slice's push: its session, the slice held, its version and values.
  absl::Status CheckSlicePush(const PushInfo& info, const std::vector<float>& gradient) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reply to a push no step will wait for (a resend already taken, a sync slice whose round
  // was stepped without it), its gradient returned; nullopt for one to hold.
  std::optional<PushResult> AnswerAtOnce(const PushInfo& info, std::vector<float>& gradient)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds the slice for its step (a slice of the worker's not taken goes).
  void Hold(const PushInfo& info, std::vector<float> gradient) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (bounded by member_wait) until a step took or released worker `id`'s slice: the reply.
  PushResult AwaitTaken(WorkerId id, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A step's members' slices, as it takes them: each with its weight, and the weights of all
  // members and of those whose slice came.
  struct Taken {
    std::vector<std::pair<std::vector<float>, double>> slices;
    std::vector<ReplicatedStep::Member> members;  // whose slices came (the slice's history takes them)
    double all_weight = 0, taken_weight = 0;
    absl::Time last_arrived = absl::InfinitePast();  // the latest of the taken slices' arrivals
  };
  // Waits (bounded) for the step's members' slices and takes those that came; a member
  // whose slice did not come is left out and its session ends here.
  absl::StatusOr<Taken> TakeMembers(const ReplicatedStep& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a step took worker `id`'s slice of `version` (its latest push).
  bool AlreadyTaken(WorkerId id, uint64_t version) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether member `m`'s slice for its model version is here, not yet taken.
  bool SliceHere(const ReplicatedStep::Member& m) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sync: Aborted, naming them, when a member's slice is not here (their sessions end
  // here): every slice takes the same members' gradients or the job goes back to its
  // common checkpoint. Async: OK (a member left out is a step of rate 0 on its own).
  absl::Status OneModel(const ReplicatedStep& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After the step: the pushes it took are answered, a sync round's others released.
  void MarkTaken(const ReplicatedStep& step, absl::Time complete) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes `step` on the slice: its members' slices (waited for, bounded), their sum, the
  // optimizer's step. `command`: the coordinator's (its wait and latency are measured).
  // One step at a time (stepping_, set by the caller).
  absl::Status TakeStep(const ReplicatedStep& step, bool command) ABSL_LOCKS_EXCLUDED(mu_);
  // The round expected ahead as a step, once every member's slice of it is here.
  std::optional<ReplicatedStep> ReadyAhead() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the round expected ahead when it is ready and no step is being taken; releases
  // mu_ meanwhile.
  void MaybeStepAhead() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The coordinator's command for a step taken ahead: OK when it is that step.
  absl::Status ConfirmAhead(const ReplicatedStep& step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Until no step is being taken (bounded: an ahead step never waits for slices or norms).
  void AwaitNoStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Pending {
    uint64_t version = 0;
    std::vector<float> gradient;
    bool taken = false;     // a step took it
    bool released = false;  // sync: the step of its version was taken without it
    absl::Time arrived;     // when the whole slice was in
    absl::Time complete;    // taken: when the last of its step's slices was in
    double batch = 0;       // the push's batch (a round's weight, --shard_steps_ahead)
  };

  const ShardCoreOptions options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<ParameterStore> store_ ABSL_GUARDED_BY(mu_);
  absl::Duration member_wait_ ABSL_GUARDED_BY(mu_) = absl::Seconds(30);
  bool sync_ ABSL_GUARDED_BY(mu_) = true;
  bool job_ended_ ABSL_GUARDED_BY(mu_) = false;                       // EndJob: the next Init replaces the slice
  NormReduction norm_reduction_ ABSL_GUARDED_BY(mu_);                 // a clipped job's (ServerPeers.StepNorm)
  bool stepping_ ABSL_GUARDED_BY(mu_) = false;                        // a step (the command's or ahead) is being taken
  std::optional<RoundAhead> ahead_ ABSL_GUARDED_BY(mu_);              // the next round, decided ahead
  std::optional<ReplicatedStep> taken_ahead_ ABSL_GUARDED_BY(mu_);    // stepped, the command not come
  std::optional<CheckpointState> before_ahead_ ABSL_GUARDED_BY(mu_);  // the slice before it (shared)
  std::map<WorkerId, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<WorkerId, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // The step's weighted sum, reused by every step: built as the slices arrive (Add outside
  // mu_, by the pushes) or by Step's thread (the control stream's) outside mu_, once no
  // Add is in flight; the rest under mu_.
  ArrivalSum arrival_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  BufferPool buffers_;
  metrics::Registry registry_;
  metrics::Counter& push_bytes_;
  metrics::Counter& pull_bytes_;
  metrics::Gauge& slice_bytes_;
  metrics::Gauge& version_gauge_;
  metrics::Histogram& step_seconds_;
  metrics::Histogram& command_wait_seconds_;
  metrics::Counter& slices_left_out_;
  metrics::Counter& summed_on_arrival_;
  metrics::Counter& steps_ahead_;
  metrics::Counter& ahead_refused_;
  metrics::Counter& unauthenticated_;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_SHARD_CORE_H_
