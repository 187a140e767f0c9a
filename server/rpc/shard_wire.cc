#include "server/rpc/shard_wire.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/tensor_codec.h"
#include "server/control/join_check.h"

// ShardOptimizer.kind is deprecated; this file writes and reads it for shards and coordinators of the previous release.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace omnilearn {
namespace server {

v1::ShardOptimizer OptimizerToProto(const OptimizerOptions& o, absl::Duration member_wait) {
  v1::ShardOptimizer p;
  p.set_optimizer(OptimizerKindToProto(o.kind));
  p.set_kind(OptimizerName(o.kind));  // deprecated: for shards of the previous release
  p.set_momentum(o.momentum);
  p.set_weight_decay(o.weight_decay);
  p.set_beta1(o.beta1);
  p.set_beta2(o.beta2);
  p.set_eps(o.eps);
  p.set_round_timeout_seconds(absl::ToDoubleSeconds(member_wait));
  p.set_clip_grad_norm(o.clip_grad_norm);
  p.mutable_options()->insert(o.hyper.begin(), o.hyper.end());
  for (const ParamGroup& g : o.groups) {
    v1::ParamGroup* out = p.add_groups();
    for (const std::string& name : g.names) out->add_tensors(name);
    out->set_lr(g.lr);
    out->set_weight_decay(g.weight_decay);
    out->mutable_options()->insert(g.hyper.begin(), g.hyper.end());
  }
  return p;
}

v1::OptimizerKind OptimizerKindToProto(OptimizerKind kind) {
  v1::OptimizerKind out = v1::OPTIMIZER_KIND_UNSPECIFIED;
  v1::OptimizerKind_Parse(absl::StrCat("OPTIMIZER_KIND_", absl::AsciiStrToUpper(OptimizerName(kind))), &out);
  return out;
}

std::optional<OptimizerKind> OptimizerKindFromProto(v1::OptimizerKind kind) {
  const std::string& name = v1::OptimizerKind_Name(kind);  // "" for a value of a later release
  constexpr absl::string_view kPrefix = "OPTIMIZER_KIND_";
  if (kind == v1::OPTIMIZER_KIND_UNSPECIFIED || !absl::StartsWith(name, kPrefix)) return std::nullopt;
  absl::StatusOr<OptimizerKind> parsed = ParseOptimizer(name.substr(kPrefix.size()));
  if (!parsed.ok()) return std::nullopt;
  return *parsed;
}

absl::Status OptimizerFromProto(const v1::ShardOptimizer& p, OptimizerOptions* o) {
  if (std::optional<OptimizerKind> kind = OptimizerKindFromProto(p.optimizer()); kind.has_value()) {
    o->kind = *kind;
  } else if (p.optimizer() == v1::OPTIMIZER_KIND_UNSPECIFIED) {  // a coordinator of an earlier release
    absl::StatusOr<OptimizerKind> named = ParseOptimizer(p.kind());
    if (!named.ok()) return named.status();
    o->kind = *named;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the coordinator's optimizer is %d, not one this shard knows: a coordinator of a later release?",
        static_cast<int>(p.optimizer())));
  }
  o->momentum = p.momentum();
  o->weight_decay = p.weight_decay();
  o->beta1 = p.beta1();
  o->beta2 = p.beta2();
  o->eps = p.eps();
  o->clip_grad_norm = p.clip_grad_norm();
  o->hyper = HyperMap(p.options().begin(), p.options().end());
  o->groups.clear();
  for (const v1::ParamGroup& g : p.groups()) {
    o->groups.push_back({{},
                         g.lr(),
                         g.weight_decay(),
                         HyperMap(g.options().begin(), g.options().end()),
                         {g.tensors().begin(), g.tensors().end()}});
  }
  return absl::OkStatus();
}

ShardRegistration RegistrationFromProto(const v1::ShardHello& hello) {
  ShardRegistration r;
  r.address = hello.address();
  r.shards = hello.shards();
  r.partition_bytes = hello.partition_bytes();
  r.index = hello.index();
  // One past the bound is enough for the check to refuse the list: a hostile one is not copied.
  const int kept = std::min(hello.checkpoint_versions_size(), kMaxShardCheckpoints + 1);
  r.checkpoint_versions.assign(hello.checkpoint_versions().begin(), hello.checkpoint_versions().begin() + kept);
  r.fingerprint = hello.fingerprint();
  r.reduces_norm = hello.reduces_norm();
  r.resets_jobs = hello.resets_jobs();
  r.steps_ahead = hello.steps_ahead();
  // As the checkpoints: one slice and one version past the bounds is enough to refuse them.
  const int slices = std::min(hello.replicas_size(), kMaxShardReplicaSlices + 1);
  for (int i = 0; i < slices; ++i) {
    const v1::SliceReplicas& held = hello.replicas(i);
    const int versions = std::min(held.versions_size(), kMaxShardCheckpoints + 1);
    r.replicas[held.index()].assign(held.versions().begin(), held.versions().begin() + versions);
  }
  return r;
}

namespace {

// Each command's message, for CommandToProto's visitor.
struct CommandEncoder {
  v1::ShardCommand* out;
  void operator()(std::monostate) const {}
  void operator()(const ShardInitCommand& c) const {
    v1::ShardInit* init = out->mutable_init();
    init->set_index(static_cast<uint32_t>(c.index));
    *init->mutable_layout() = LayoutToProto(c.layout);
    init->set_version(c.version);
    *init->mutable_optimizer() = OptimizerToProto(c.optimizer, c.member_wait);
    init->set_fingerprint(c.fingerprint);
    init->set_sync(c.sync);
    init->set_restore(c.restore);
    init->set_job(c.job);
    init->set_whole_tensors(c.whole_tensors);
    init->set_replica_from(c.replica_from);
  }
  void operator()(const ShardSessionCommand& c) const {
    v1::ShardSession* session = out->mutable_session();
    session->set_worker_id(c.id);
    if (c.closed) {
      session->set_closed(true);
    } else {
      session->set_session_secret(c.secret);
    }
  }
  void operator()(const ReplicatedStep& step) const { *out->mutable_step() = StepToProto(step); }
  void operator()(const RoundAhead& round) const {
    v1::ShardRoundAhead* p = out->mutable_round_ahead();
    p->set_version(round.version);
    for (WorkerId id : round.members) p->add_worker_ids(id);
    p->set_learning_rate(round.learning_rate);
    p->set_weigh_by_batch(round.weigh_by_batch);
  }
  void operator()(const ShardCheckpointCommand& c) const {
    out->mutable_checkpoint()->set_version(c.version);
    out->mutable_checkpoint()->set_history(c.history);
    out->mutable_checkpoint()->set_replica_to(c.replica_to);
  }
};

}  // namespace

v1::ShardCommand CommandToProto(const ShardCommand& command) {
  v1::ShardCommand out;
  std::visit(CommandEncoder{&out}, command);
  return out;
}

void ShardMapToProto(const ShardMapAnswer& answer, v1::ShardMap* out) {
  out->set_shards(static_cast<uint32_t>(answer.shards));
  out->set_partition_bytes(answer.partition_bytes);
  out->set_fingerprint(answer.fingerprint);
  out->set_push_in_order(answer.push_in_order);
  out->set_whole_tensors(answer.whole_tensors);
  for (const std::string& address : answer.addresses) out->add_addresses(address);
}

v1::ShardStep StepToProto(const ReplicatedStep& step) {
  v1::ShardStep p;
  p.set_version(step.version);
  for (const ReplicatedStep::Member& m : step.members) {
    v1::ShardStepMember* pm = p.add_members();
    pm->set_worker_id(m.id);
    pm->set_model_version(m.model_version);
    pm->set_weight(m.weight);
  }
  p.set_update_scale(step.settings.update_scale);
  p.set_learning_rate(step.settings.learning_rate.value_or(0.0));
  p.mutable_group_rates()->Add(step.settings.group_rates.begin(), step.settings.group_rates.end());
  p.set_buffer_blend(step.settings.buffer_blend);
  p.set_momentum(step.settings.momentum.value_or(-1));  // -1 on the wire: the optimizer's own
  p.set_momentum_cut(step.settings.momentum_cut);
  p.set_sample_share(step.settings.sample_share);
  p.set_predict_steps(step.predict_steps);
  return p;
}

RoundAhead RoundAheadFromProto(const v1::ShardRoundAhead& p) {
  RoundAhead round;
  round.version = p.version();
  round.members.assign(p.worker_ids().begin(), p.worker_ids().end());
  round.learning_rate = p.learning_rate();
  round.weigh_by_batch = p.weigh_by_batch();
  return round;
}

ReplicatedStep StepFromProto(const v1::ShardStep& p) {
  ReplicatedStep step;
  step.version = p.version();
  for (const v1::ShardStepMember& m : p.members())
    step.members.push_back({m.worker_id(), m.model_version(), m.weight()});
  step.settings.update_scale = p.update_scale();
  step.settings.learning_rate = p.learning_rate();
  step.settings.group_rates.assign(p.group_rates().begin(), p.group_rates().end());
  step.settings.buffer_blend = p.buffer_blend();
  if (p.momentum() >= 0) step.settings.momentum = p.momentum();
  step.settings.momentum_cut = p.momentum_cut();
  step.settings.sample_share = p.sample_share() > 0 ? p.sample_share() : 1.0;  // 0: a coordinator of an earlier release
  step.predict_steps = p.predict_steps();
  return step;
}

namespace {

// OK when `value` is finite and within [lo, hi]; else InvalidArgument naming `field`.
absl::Status InRange(const char* field, double value, double lo, double hi) {
  if (std::isfinite(value) && value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "the coordinator's %s is %g, outside [%g, %g]: a coordinator of another release?", field, value, lo, hi));
}

absl::Status CheckOptimizer(const v1::ShardOptimizer& o) {
  for (const absl::Status& s :
       {InRange("optimizer.momentum", o.momentum(), 0, 0.999999),
        InRange("optimizer.weight_decay", o.weight_decay(), 0, 10),
        InRange("optimizer.beta1", o.beta1(), 0, 0.999999999), InRange("optimizer.beta2", o.beta2(), 0, 0.999999999),
        InRange("optimizer.eps", o.eps(), 1e-15, 1),
        InRange("optimizer.round_timeout_seconds", o.round_timeout_seconds(), 0.001, 86400),
        InRange("optimizer.clip_grad_norm", o.clip_grad_norm(), 0, 1e9)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckStep(const v1::ShardStep& step) {
  if (step.members_size() > kMaxStepMembers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the coordinator's step names %d members; at most %d", step.members_size(), kMaxStepMembers));
  }
  for (const absl::Status& s : {InRange("step.update_scale", step.update_scale(), 0, 1e30),
                                InRange("step.learning_rate", step.learning_rate(), 0, 1e6),
                                InRange("step.buffer_blend", step.buffer_blend(), 0, 1),
                                InRange("step.momentum", step.momentum(), -1, 0.999999),
                                InRange("step.momentum_cut", step.momentum_cut(), 0, 1),
                                InRange("step.sample_share", step.sample_share(), 0, 1),
                                InRange("step.predict_steps", step.predict_steps(), 0, kMaxPredictSteps)}) {
    if (!s.ok()) return s;
  }
  for (double rate : step.group_rates()) {
    if (absl::Status s = InRange("step.group_rates", rate, 0, 1e6); !s.ok()) return s;
  }
  for (const v1::ShardStepMember& m : step.members()) {
    if (absl::Status s = InRange("step.members.weight", m.weight(), 0, 1e30); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// A server's address in a command: empty, or a host:port as a registration's.
absl::Status CheckReplicaAddress(const char* field, const std::string& address) {
  if (address.empty() || IsPrintableWord(address, kMaxShardAddressBytes)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "the coordinator's %s is not a host:port of at most %d printable characters", field, kMaxShardAddressBytes));
}

}  // namespace

absl::Status CheckShardCommand(const v1::ShardCommand& command) {
  switch (command.kind_case()) {
    case v1::ShardCommand::kInit:
      if (command.init().index() == 0) return absl::InvalidArgumentError("the coordinator's init names slice 0");
      if (absl::Status s = CheckReplicaAddress("init.replica_from", command.init().replica_from()); !s.ok()) return s;
      return CheckOptimizer(command.init().optimizer());
    case v1::ShardCommand::kSession: {
      const v1::ShardSession& session = command.session();
      if (session.session_secret().size() > kMaxSessionSecretBytes ||
          (!session.closed() && session.session_secret().empty())) {
        return absl::InvalidArgumentError(absl::StrFormat("the coordinator's session secret holds %d bytes: 1 to %d",
                                                          session.session_secret().size(), kMaxSessionSecretBytes));
      }
      return absl::OkStatus();
    }
    case v1::ShardCommand::kStep:
      return CheckStep(command.step());
    case v1::ShardCommand::kRoundAhead:
      if (command.round_ahead().worker_ids_size() > kMaxStepMembers) {
        return absl::InvalidArgumentError(absl::StrFormat("the coordinator's round ahead names %d members; at most %d",
                                                          command.round_ahead().worker_ids_size(), kMaxStepMembers));
      }
      return InRange("round_ahead.learning_rate", command.round_ahead().learning_rate(), 0, 1e6);
    case v1::ShardCommand::kCheckpoint:
      return CheckReplicaAddress("checkpoint.replica_to", command.checkpoint().replica_to());
    case v1::ShardCommand::kChunk:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("an unknown command from the coordinator (a newer release?)");
  }
}

v1::CheckpointStatus CheckpointsToProto(const CheckpointHealthView& view) {
  v1::CheckpointStatus p;
  p.set_in_memory(view.in_memory);
  p.set_newest_version(view.newest_version);
  p.set_newest_age_seconds(absl::ToDoubleSeconds(view.newest_age));
  p.set_failures(view.failures);
  p.set_last_error(view.last_error.substr(0, kMaxCheckpointErrorBytes));
  p.set_corrupt_skipped(view.corrupt_skipped);
  return p;
}

absl::StatusOr<CheckpointHealthView> CheckpointsFromProto(const v1::CheckpointStatus& p) {
  constexpr double kYear = 365.0 * 86400;
  if (!(p.newest_age_seconds() >= 0 && p.newest_age_seconds() <= kYear)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a checkpoint age of %g s is not in [0, a year]", p.newest_age_seconds()));
  }
  if (p.last_error().size() > kMaxCheckpointErrorBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("a checkpoint error of %d bytes is longer than %d",
                                                      p.last_error().size(), kMaxCheckpointErrorBytes));
  }
  CheckpointHealthView view;
  view.in_memory = p.in_memory();
  view.newest_version = p.newest_version();
  view.newest_age = absl::Seconds(p.newest_age_seconds());
  view.failures = p.failures();
  view.last_error = p.last_error();
  view.corrupt_skipped = p.corrupt_skipped();
  return view;
}

}  // namespace server
}  // namespace omnilearn
