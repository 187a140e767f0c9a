#include "server/rpc/shard_apply.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/shard_map.h"
#include "server/rpc/shard_wire.h"

namespace omnilearn {
namespace server {

namespace {

std::unique_ptr<const CheckpointStore> StoreFor(const ShardApplierOptions& o) {
  if (o.checkpoint_dir.empty()) return std::make_unique<MemoryCheckpoints>(o.checkpoint_keep);
  return std::make_unique<CheckpointDir>(o.checkpoint_dir, o.checkpoint_keep);
}

}  // namespace

ShardApplier::ShardApplier(ShardApplierOptions options, ShardCore* shard)
    : options_(std::move(options)),
      shard_(shard),
      checkpoints_(StoreFor(options_)),
      dir_(options_.checkpoint_dir.empty() ? nullptr : static_cast<const CheckpointDir*>(checkpoints_.get())) {}

absl::Status ShardApplier::Prepare() {
  if (dir_ == nullptr) return absl::OkStatus();
  if (absl::Status s = dir_->Prepare(); !s.ok()) return s;
  // A restart on the slice's checkpoints asks for that slice again.
  absl::StatusOr<std::optional<std::pair<std::string, CheckpointState>>> newest =
      dir_->LoadNewest([this](const std::string& warning) {
        Log(warning);
        if (options_.health != nullptr) options_.health->SkippedCorrupt();
      });
  if (newest.ok() && newest->has_value()) disk_index_ = (*newest)->second.slice;
  return absl::OkStatus();
}

void ShardApplier::Restart() {
  pending_.reset();
  stream_open_ = true;
}

std::vector<uint64_t> ShardApplier::CheckpointVersions() const { return checkpoints_->Versions(); }

absl::Status ShardApplier::Apply(const v1::ShardCommand& c) {
  if (absl::Status s = CheckShardCommand(c); !s.ok()) return s;
  if (pending_ != nullptr && !c.has_chunk()) {
    return absl::InvalidArgumentError("the slice's values ended before they were complete");
  }
  switch (c.kind_case()) {
    case v1::ShardCommand::kInit:
      return ApplyInit(c.init());
    case v1::ShardCommand::kChunk:
      return ApplyChunk(c.chunk());
    case v1::ShardCommand::kSession:
      if (c.session().closed()) {
        shard_->CloseSession(c.session().worker_id());
      } else {
        shard_->OpenSession(c.session().worker_id(), c.session().session_secret());
      }
      return absl::OkStatus();
    case v1::ShardCommand::kStep:
      return shard_->Step(StepFromProto(c.step()));
    case v1::ShardCommand::kCheckpoint:
      return ApplyCheckpoint(c.checkpoint());
    case v1::ShardCommand::kRoundAhead:
      shard_->ExpectRound(RoundAheadFromProto(c.round_ahead()));
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("an unknown command from the coordinator (a newer release?)");
  }
}

bool ShardApplier::IsOpening(const v1::ShardCommand& c) { return c.has_session() && !c.session().closed(); }

bool ShardApplier::MayBePassed(const v1::ShardCommand& c) {
  return c.has_session() || c.has_step() || c.has_checkpoint() || c.has_round_ahead();
}

absl::Status ShardApplier::OpenAhead(const v1::ShardCommand& c) {
  if (!IsOpening(c)) return absl::InvalidArgumentError("only a session's opening is applied ahead of its place");
  if (absl::Status s = CheckShardCommand(c); !s.ok()) return s;
  shard_->OpenSession(c.session().worker_id(), c.session().session_secret());
  return absl::OkStatus();
}

absl::Status ShardApplier::ApplyInit(const v1::ShardInit& init) {
  absl::StatusOr<ModelLayout> layout = ParseLayout(init.layout());
  if (!layout.ok()) return layout.status();
  absl::StatusOr<ShardMap> map =
      ShardMap::Plan(*layout, options_.shards, options_.partition_bytes, init.whole_tensors());
  if (!map.ok()) return map.status();
  const uint32_t index = init.index();  // >= 1 (CheckShardCommand); compared before any cast
  if (map->fingerprint() != init.fingerprint() || index >= static_cast<uint32_t>(map->shards())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this shard's map of the model (%s, fingerprint %016x) is not the coordinator's (fingerprint %016x, slice "
        "%u): the shard and the coordinator are of different releases or jobs",
        map->DebugString(), map->fingerprint(), init.fingerprint(), index));
  }
  if (slice_asked() != 0 && index != static_cast<uint32_t>(slice_asked())) {
    return absl::AbortedError(absl::StrFormat("the coordinator offered slice %u, and this shard %s slice %d", index,
                                              held_index_ != 0 ? "holds" : "was started for", slice_asked()));
  }
  auto p = std::make_unique<PendingInit>();
  p->init = init;
  p->slice = map->slice_layout(static_cast<int>(index));
  p->fingerprint = map->fingerprint();
  if (absl::Status s = OptimizerFromProto(init.optimizer(), &p->optimizer); !s.ok()) return s;
  if (absl::Status s = ResolveGroupNames(p->slice, /*pieces=*/true, &p->optimizer.groups); !s.ok()) return s;
  if (init.restore()) return ApplyRestore(*p);
  p->values.emplace(&p->slice);
  pending_ = std::move(p);
  return pending_->values->complete() ? FinishInit() : absl::OkStatus();
}

absl::Status ShardApplier::ApplyChunk(const v1::TensorChunk& chunk) {
  if (pending_ == nullptr) return absl::InvalidArgumentError("a chunk of the slice's values without an init");
  if (absl::Status s = pending_->values->Add(chunk); !s.ok()) return s;
  return pending_->values->complete() ? FinishInit() : absl::OkStatus();
}

absl::Status ShardApplier::FinishInit() {
  std::unique_ptr<PendingInit> p = std::move(pending_);
  absl::StatusOr<std::vector<float>> values = p->values->Finish();
  if (!values.ok()) return values.status();
  const v1::ShardInit& init = p->init;
  if (job_ != 0 && init.job() > job_) {
    if (absl::Status s = BeginJob(init.job()); !s.ok()) return s;
  }
  if (absl::Status s = PrepareNorm(*p); !s.ok()) return s;
  if (absl::Status s = shard_->Init(p->slice, *std::move(values), init.version(), p->optimizer,
                                    absl::Seconds(init.optimizer().round_timeout_seconds()), init.sync());
      !s.ok()) {
    return s;
  }
  fingerprint_ = p->fingerprint;
  held_index_ = static_cast<int>(init.index());
  if (init.job() != 0) job_ = init.job();
  Log(absl::StrFormat("holding slice %u of the model (map fingerprint %016x)", init.index(), fingerprint_));
  return absl::OkStatus();
}

absl::StatusOr<CheckpointState> ShardApplier::RestoreFrom(const PendingInit& p) {
  const v1::ShardInit& init = p.init;
  const std::string& from = init.replica_from();
  if (from.empty()) return checkpoints_->Load(init.version());
  if (!options_.fetch_replica) {
    return absl::FailedPreconditionError(
        "the coordinator restores this slice from a replica, and this shard cannot "
        "reach other servers");
  }
  absl::StatusOr<CheckpointState> replica =
      options_.fetch_replica(from, static_cast<int>(init.index()), init.version(), p.fingerprint);
  if (!replica.ok()) {
    // The job goes back again, to a version this shard can reach.
    return absl::AbortedError(absl::StrCat("slice ", init.index(), "'s replica of version ", init.version(), " at ",
                                           from, " could not be read: ", replica.status().message()));
  }
  if (replica->slice != static_cast<int>(init.index()) || replica->version != init.version()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the replica at %s holds slice %d at version %d, not slice %u at version %d", from,
                        replica->slice, replica->version, init.index(), init.version()));
  }
  if (absl::StatusOr<std::string> kept = checkpoints_->Write(*replica); !kept.ok()) {
    Log(absl::StrCat("the replica restores the slice, and could not be kept as this shard's checkpoint: ",
                     kept.status().message()));
  }
  Log(absl::StrCat("slice ", init.index(), " of version ", init.version(), " taken from its replica at ", from));
  return replica;
}

absl::Status ShardApplier::ApplyRestore(const PendingInit& p) {
  const v1::ShardInit& init = p.init;
  absl::StatusOr<CheckpointState> checkpoint = RestoreFrom(p);
  if (!checkpoint.ok()) return checkpoint.status();
  if (absl::Status s = PrepareNorm(p); !s.ok()) return s;
  if (absl::Status s = shard_->Restore(p.slice, *checkpoint, p.optimizer,
                                       absl::Seconds(init.optimizer().round_timeout_seconds()), init.sync());
      !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(s.message(), " (is ", checkpoints_->where(), " another job's?)"));
  }
  if (absl::Status s = checkpoints_->DropNewerThan(init.version()); !s.ok()) return s;
  fingerprint_ = p.fingerprint;
  held_index_ = static_cast<int>(init.index());
  if (init.job() != 0) job_ = init.job();
  Log(absl::StrCat("slice ", init.index(), " back at its checkpoint of version ", init.version(), " (",
                   checkpoints_->where(), ")"));
  return absl::OkStatus();
}

absl::Status ShardApplier::BeginJob(uint64_t job) {
  shard_->EndJob();
  std::string aside;
  if (!checkpoints_->Versions().empty()) {
    absl::StatusOr<std::string> moved = checkpoints_->MoveAside(absl::Now());
    if (!moved.ok()) return moved.status();
    aside = absl::StrCat("; its checkpoints moved to ", *moved);
  }
  Log(absl::StrFormat("job %d begins: the slice of job %d is replaced%s", job, job_, aside));
  return absl::OkStatus();
}

absl::Status ShardApplier::PrepareNorm(const PendingInit& p) {
  if (p.optimizer.clip_grad_norm <= 0) return absl::OkStatus();
  if (!options_.step_norm) {
    return absl::FailedPreconditionError("the job clips the global gradient norm, and this shard cannot reach it");
  }
  shard_->SetNormReduction([step_norm = options_.step_norm, index = p.init.index(), fingerprint = p.fingerprint](
                               uint64_t version, double sum_squares) {
    v1::ShardNorm part;
    part.set_version(version);
    part.set_index(index);
    part.set_sum_squares(sum_squares);
    part.set_fingerprint(fingerprint);
    return step_norm(part);
  });
  return absl::OkStatus();
}

absl::Status ShardApplier::ApplyCheckpoint(const v1::ShardCheckpoint& checkpoint) {
  // The slice may have stepped ahead from that version already (--shard_steps_ahead): it
  // kept its state there.
  absl::StatusOr<CheckpointState> state = shard_->CaptureAt(checkpoint.version());
  if (!state.ok()) return state.status();
  state->slice = held_index_;
  if (checkpoint.history() != 0 && state->history != checkpoint.history()) {
    // A step here took other members than the coordinator's: this slice is not one model
    // with the others. No checkpoint of it is kept; the job goes back to the newest common
    // one, which every slice wrote with the coordinator's history.
    return absl::AbortedError(absl::StrFormat(
        "slice %d's step history at version %d is %016x and the coordinator's %016x: a step took other members "
        "here; not checkpointed, the job goes back to its common checkpoint",
        held_index_, state->version, state->history, checkpoint.history()));
  }
  const absl::StatusOr<std::string> written = checkpoints_->Write(*state);
  Report(written, state->version);
  if (written.ok() && !checkpoint.replica_to().empty() && options_.keep_replica) {
    options_.keep_replica(checkpoint.replica_to(), *state, fingerprint_);
  }
  return absl::OkStatus();
}

void ShardApplier::Report(const absl::StatusOr<std::string>& written, uint64_t version) {
  if (!written.ok()) {
    Log(absl::StrCat("checkpoint failed (training goes on; the previous checkpoints stay): ",
                     written.status().message()));
  } else if (!written->empty()) {
    Log(absl::StrCat("checkpoint ", *written));
  }
  if (options_.health == nullptr) return;
  if (written.ok()) {
    options_.health->Written(version);
  } else {
    options_.health->Failed(written.status());
  }
  if (!options_.report_checkpoints || !stream_open_) return;
  v1::ShardCheckpoints report;
  report.set_index(static_cast<uint32_t>(held_index_));
  report.set_fingerprint(fingerprint_);
  *report.mutable_checkpoints() = CheckpointsToProto(options_.health->View());
  // The coordinator's status only: a report that does not arrive is sent again with the next.
  if (absl::Status s = options_.report_checkpoints(report); !s.ok() && stream_open_) {
    Log(absl::StrCat("the coordinator did not take this shard's checkpoint report: ", s.message()));
  }
}

}  // namespace server
}  // namespace omnilearn
