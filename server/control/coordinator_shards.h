// The coordinator's side of a sharded job (docs/SHARDING.md): which shard servers
// registered, the job's shard map, and each shard's queue of commands (the slice's first
// values, sessions opened and closed, the steps to replay). The Shard RPC drains a
// shard's queue onto its stream; the core's Replication hooks fill the queues.
#ifndef OMNILEARN_SERVER_CONTROL_COORDINATOR_SHARDS_H_
#define OMNILEARN_SERVER_CONTROL_COORDINATOR_SHARDS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/shard_map.h"
#include "server/checkpoint/checkpoint.h"
#include "server/checkpoint/checkpoint_health.h"
#include "server/control/parameter_server_core.h"
#include "server/control/shard_commands.h"

namespace omnilearn {
namespace server {

struct CoordinatorShardsOptions {
  int shards = 1;  // the coordinator (slice 0) and shards - 1 shard servers
  int64_t partition_bytes = ShardMap::kAutoPartitionBytes;
  std::string address;                             // the coordinator's, as workers reach it
  OptimizerOptions optimizer;                      // what every shard's optimizer must share
  absl::Duration member_wait = absl::Seconds(30);  // a shard's step waits this long for a member's slice
  bool sync = true;                                // the job's mode is sync (rounds)
  const Clock* clock = Clock::Real();
  std::function<void(const std::string&)> log;
  // A job that clips (optimizer.clip_grad_norm > 0): how long a step's norm waits for every
  // slice's part (the shards wait up to round_timeout for their members' slices first).
  absl::Duration norm_wait = absl::Seconds(60);
  // --reset_when_done: a finished job gives way to the next on the same servers; shards of a
  // release that cannot take a later job's slice (ShardRegistration::resets_jobs) are refused.
  bool reset_when_done = false;
  // --push_slices_in_order: the Join answer tells workers to push the slices one after the
  // other (ShardMapAnswer::push_in_order).
  bool push_in_order = false;
  // --shard_steps_ahead (sync): each round's members and rate go to the shards when the round
  // before closes (Replication::round_ahead), and a shard steps as soon as their slices are
  // in; shards of a release that cannot (ShardRegistration::steps_ahead) are refused.
  bool steps_ahead = false;
  // --replicate_slices: each slice's checkpoint also goes to the next server's memory (slice
  // i's to the server of slice i + 1, the last slice's to the coordinator), and a shard lost
  // for good, disk and all, is replaced by one that takes its slice from there. Without it, a
  // shard that registers after the first step must bring its own checkpoints.
  bool replicate = false;
  // The replicas the coordinator itself keeps, by slice (ReplicaStore::Held). Null: none.
  std::function<std::map<int, std::vector<uint64_t>>()> own_replicas;
};

// A registration's fields, range-checked before anything is taken from them:
// FailedPrecondition for another shard count or partition size than the job's,
// InvalidArgument for an empty, overlong or unprintable address, too many checkpoints or
// replicas, or replicas of a slice the job does not have.
absl::Status CheckShardRegistration(const ShardRegistration& hello, int shards, int64_t partition_bytes);

// Thread-safe.
class CoordinatorShards {
 public:
  // What a shard's stream sends next: a command, with the slice's values after an init.
  struct Outgoing {
    ShardCommand command;
    std::shared_ptr<const std::vector<float>> values;  // init: the slice's first values
  };

  // Given the checkpoint versions each shard holds ([i] for slice i; [0] unused), takes the
  // coordinator back to the newest checkpoint it holds too and returns that version; an
  // error when there is none. Called without this class's lock.
  using Recover = std::function<absl::StatusOr<uint64_t>(const std::vector<std::vector<uint64_t>>& held)>;

  explicit CoordinatorShards(CoordinatorShardsOptions options);

  // With checkpoints (set before the first registration): a shard that returns after the
  // job's first step makes the job go back to the shards' common checkpoint.
  void SetRecover(Recover recover);
  // Given a shard's address, the versions of slice 0's replicas it keeps and the map it holds
  // a slice of, takes the job from them and resumes it (Resume), as a restarted coordinator
  // would from its own checkpoints. Called without this class's lock.
  using Adopt = std::function<absl::Status(const std::string& address, const std::vector<uint64_t>& versions,
                                           uint64_t fingerprint)>;
  // With replicas (set before the first registration): a coordinator without a job (started
  // on an empty disk, its host's checkpoints lost) that a shard keeping slice 0's replicas
  // registers with takes its job from them; joins wait meanwhile. Unset: those replicas are
  // not looked at, and the first join starts a new job.
  void SetAdopt(Adopt adopt);
  // A restarted coordinator goes on with the job its checkpoint recorded (after
  // SetRecover, before the first registration): the job's map is planned again from it,
  // and the job starts in a recovery that every shard's registration joins, as after a
  // shard's return. FailedPrecondition when the job was cut otherwise than this
  // coordinator's flags say, or when `slice0` (the core's restored layout) is not the
  // map's slice 0.
  absl::Status Resume(const ShardedJob& job, const ModelLayout& slice0);
  // What a checkpoint records of the job once a model was adopted (nullopt before).
  std::optional<ShardedJob> sharded_job() const;

  // A shard server registers. Returns its index. The hello is checked (CheckShardRegistration);
  // FailedPrecondition when every slice has its shard, for a shard of another map
  // (fingerprint), for a shard that cannot reduce a clipped job's norm
  // (ShardRegistration::reduces_norm) or take a later job's slice (resets_jobs, with
  // reset_when_done), for one returning after the job's first step without checkpoints (or
  // to a coordinator that keeps none: its slice's training would be lost), and for the
  // registration that leaves no checkpoint common to every server (its slice stays free
  // and the recovery waits: no shard's claim ends the job). Unavailable for a slice still
  // held by a connected shard (its predecessor's stream may not have ended yet).
  //
  // A shard returning after the first step starts a recovery: the other shards' streams
  // end (Next answers Aborted) and they register again, each saying which checkpoints it
  // holds; the last registration runs the Recover hook and queues every shard a restore
  // of the common version. Until then pushes are refused and joins wait (Serving).
  // `*generation` (when given) names this registration's stream for Next.
  absl::StatusOr<int> Register(const ShardRegistration& hello, uint64_t* generation = nullptr);
  // The next command for shard `index`'s stream of `generation`, waiting until `deadline`
  // (an empty command when none came). Aborted: the shard must register again (a recovery began); Cancelled:
  // the stream ends (the shard was replaced, or shutdown and nothing is left to send).
  absl::Status Next(int index, uint64_t generation, Outgoing* out, absl::Time deadline);
  // The stream of slice `index`'s current registration.
  uint64_t generation(int index) const;
  // The shard's stream ended.
  void Disconnect(int index);
  // Where the coordinator's own checkpoint goes as slice 0's replica: the server of slice 1
  // and the job's map's fingerprint, while it is connected and replicas are kept (nullopt
  // otherwise).
  std::optional<std::pair<std::string, uint64_t>> ReplicaTarget() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every shard registered and no recovery is under way; Unavailable naming
  // the missing ones after `deadline`.
  absl::Status AwaitShards(absl::Time deadline);
  // OK while every slice's shard is there (a push may go in); as AwaitShards otherwise.
  absl::Status Serving() const;
  // Streams end once what is queued was sent (the last checkpoint command included).
  void Shutdown();

  // A joiner's whole model: the job's map for it (planned once per layout and kind of map),
  // the slice 0 layout and values its join gives the core, and the full values kept until
  // the core says whose model it adopted. The map cuts no tensor when the optimizer the
  // joiner brings (else the job's) reads whole tensors. InvalidArgument when the model
  // cannot be cut.
  absl::StatusOr<ShardMap> PlanFor(const ModelLayout& layout, std::optional<OptimizerKind> brought = std::nullopt);
  void StashInitial(const std::string& joiner, const ModelLayout& layout, ShardMap map,
                    std::shared_ptr<const std::vector<float>> values);
  void ForgetInitial(const std::string& joiner);
  ShardMapAnswer Answer(const ShardMap& map) const;
  // Slice `index`'s layout (the model was adopted: an init was queued).
  ModelLayout SliceLayout(int index) const;
  // The job's whole layout once a model was adopted.
  std::optional<ModelLayout> job_layout() const;
  // The job's shard map once a model was adopted.
  std::optional<ShardMap> map() const;

  // The core's hooks (Replication): they only queue, but for a clipped job's norm, which
  // waits for the shards' parts (ReduceNorm for slice 0).
  Replication Hooks();

  // A clipped job's step leaving `version`: slice `index`'s part of the update's squared
  // norm. Returns every slice's parts summed once all came (slice 0, the coordinator's,
  // included). When they did not by `deadline`, or a shard that owes its part is gone:
  // slice 0 gets the sum of the parts that came (the step goes on; the missing shard's
  // return takes the job back to a common checkpoint) and the reduction is closed: a
  // shard's part, waiting or later, gets FailedPrecondition. InvalidArgument for an index
  // out of range or a part given twice.
  absl::StatusOr<double> ReduceNorm(uint64_t version, int index, double sum_squares, absl::Time deadline);

  int registered() const;

  // Each shard server as the coordinator sees it (omnilearn_ctl status lists them).
  struct ShardInfo {
    int index = 0;
    std::string address;
    bool connected = false;
    int64_t slice_bytes = 0;
    uint64_t steps_sent = 0;
    size_t queued = 0;
    absl::Duration missing_for;  // how long the slice has had no shard (0 while connected)
    // Its checkpoints as it last reported them, aged to now (none: no report yet).
    std::optional<CheckpointHealthView> checkpoints;
  };
  std::vector<ShardInfo> Shards() const;
  // Shard `index`'s checkpoints after one it was told to take (written or failed).
  // FailedPrecondition for a slice or map (`fingerprint`) that is not this job's.
  absl::Status ReportCheckpoints(int index, uint64_t fingerprint, const CheckpointHealthView& view)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Gauges per shard on the coordinator's /metrics: connected, seconds missing, commands
  // queued, steps sent, and its checkpoints' age and failures (as last reported).
  void ExportMetrics(metrics::Registry& registry);
  // While training waits for slices without a shard: a line naming each and for how long
  // ("" when none is missing).
  std::string WaitingLine() const;

 private:
  // FailedPrecondition when the job needs what a shard of an earlier release cannot do
  // (ShardRegistration's reduces_norm, resets_jobs, steps_ahead), naming it.
  absl::Status CheckReleaseCan(const ShardRegistration& hello) const;
  struct Slot {
    std::string address;
    bool connected = false;
    uint64_t generation = 0;  // a new registration replaces the stream of the old one
    uint64_t steps_sent = 0;
    std::deque<Outgoing> queue;
    std::vector<uint64_t> checkpoints;                   // the versions it said it holds
    std::map<uint64_t, std::vector<uint64_t>> replicas;  // the other slices' replicas it keeps
    uint64_t recovery = 0;                               // the recovery it registered in
    bool must_register = false;                          // a recovery ended its stream
    absl::Time missing_since;                            // while not connected: since when
    std::optional<CheckpointHealthView> reported;        // its checkpoints' health, as last reported
    absl::Time reported_at;                              // when
  };
  void Enqueue(const ShardCommand& command) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Each connected shard's own command.
  void Enqueue(const std::function<ShardCommand(int index)>& command_for) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `replica_from`: with `restore`, the server whose replica of the slice the shard restores ("": its own checkpoint).
  void QueueInit(int index, bool restore, uint64_t version, const std::string& replica_from = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where slice `index`'s replica goes: the next slice's server, the coordinator for the last.
  std::string ReplicaHolder(int index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The servers that keep replicas of slice `index` (connected shards, then the coordinator),
  // each with the versions it keeps.
  std::vector<std::pair<std::string, std::vector<uint64_t>>> ReplicasOf(int index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The versions of slice `index` every server together holds: its shard's checkpoints and
  // the replicas kept of it, newest first.
  std::vector<uint64_t> HeldOf(int index) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The server that keeps slice `index`'s replica of `version` ("" when none does).
  std::string ReplicaOf(int index, uint64_t version) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ModelAdopted(const std::string& joiner);
  // Job number `job` begins (--reset_when_done): the last job's model, map, sessions and
  // norms are forgotten; the next model adopted goes to every shard in place of its slice.
  void JobReset(uint64_t job);
  // Register's parts: the slice a hello may take, and a registration after the first step.
  absl::StatusOr<int> FreeSlice(const ShardRegistration& hello) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Return(int index) ABSL_LOCKS_EXCLUDED(mu_);
  // Slot `index`'s registration at a coordinator without a job names replicas of slice 0:
  // the job is taken from them (SetAdopt's hook); when it cannot be, the registration is refused.
  absl::Status AdoptFrom(const ShardRegistration& hello, int index) ABSL_LOCKS_EXCLUDED(mu_);
  // The coordinator holds no job yet and may take one from slice 0's replicas (SetAdopt).
  bool WithoutJob() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static bool KeepsSlice0(const ShardRegistration& hello);
  // Unavailable for a live shard of a job that trained, at a coordinator without a job,
  // that keeps no replica of slice 0: the job must not start over its slice.
  absl::Status MayStartOver(const ShardRegistration& hello) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a recovery: the streams of the shards other than `returned` (0: all) end; they
  // register again, saying which checkpoints they hold.
  void BeginRecovery(int returned) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's rules for a slice: the map's fingerprint, and after the first step a
  // coordinator with checkpoints and a shard that brings some.
  absl::Status MayTakeSlice(const ShardRegistration& hello) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Missing() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorShardsOptions options_;
  mutable absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);  // [0] unused: the coordinator's own slice
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool stepped_ ABSL_GUARDED_BY(mu_) = false;  // the job took a step: a slice cannot be re-sent
  Recover recover_ ABSL_GUARDED_BY(mu_);
  Adopt adopt_ ABSL_GUARDED_BY(mu_);
  uint64_t recovery_ ABSL_GUARDED_BY(mu_) = 0;  // recoveries begun
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;
  bool restoring_ ABSL_GUARDED_BY(mu_) = false;                   // a registration runs the Recover hook
  std::string adopting_ ABSL_GUARDED_BY(mu_);                     // the shard the job is being taken from ("": none)
  std::optional<uint64_t> told_checkpoint_ ABSL_GUARDED_BY(mu_);  // the last checkpoint version queued
  struct Stashed {
    ModelLayout layout;
    ShardMap map;  // PlanFor's, for that layout
    std::shared_ptr<const std::vector<float>> values;
  };
  std::map<std::string, Stashed> stashed_ ABSL_GUARDED_BY(mu_);
  std::optional<ModelLayout> layout_ ABSL_GUARDED_BY(mu_);  // the job's whole model
  // The job's optimizer (Replication::optimizer: a worker's, a checkpoint's or the flags').
  OptimizerOptions optimizer_ ABSL_GUARDED_BY(mu_);
  std::optional<ShardMap> map_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::vector<float>> initial_ ABSL_GUARDED_BY(mu_);
  std::map<WorkerId, std::string> sessions_ ABSL_GUARDED_BY(mu_);
  // ReduceNorm's steps in progress, by version (the latest few: the core takes one step at
  // a time, and the shards follow its order).
  struct NormParts {
    double sum = 0;
    std::vector<bool> given;  // by slice
    int count = 0;
    bool closed = false;  // slice 0 went on without the parts still missing
  };
  // Shared with the calls waiting on them: a recovery or a new job drops them (closed).
  std::map<uint64_t, std::shared_ptr<NormParts>> norms_ ABSL_GUARDED_BY(mu_);
  void DropNorms() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t job_ ABSL_GUARDED_BY(mu_) = 1;  // the core's job number (ShardInit.job)
  // A part still missing cannot come: its shard is not connected (or a recovery began).
  bool NormStalled(const NormParts& parts) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_CONTROL_COORDINATOR_SHARDS_H_
