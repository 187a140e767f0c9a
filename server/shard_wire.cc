#include "server/shard_wire.h"

namespace omnilearn {
namespace server {

v1::ShardOptimizer OptimizerToProto(const OptimizerOptions& o, absl::Duration member_wait) {
  v1::ShardOptimizer p;
  p.set_kind(OptimizerName(o.kind));
  p.set_momentum(o.momentum);
  p.set_weight_decay(o.weight_decay);
  p.set_beta1(o.beta1);
  p.set_beta2(o.beta2);
  p.set_eps(o.eps);
  p.set_round_timeout_seconds(absl::ToDoubleSeconds(member_wait));
  return p;
}

absl::Status OptimizerFromProto(const v1::ShardOptimizer& p, OptimizerOptions* o) {
  absl::StatusOr<OptimizerKind> kind = ParseOptimizer(p.kind());
  if (!kind.ok()) return kind.status();
  o->kind = *kind;
  o->momentum = p.momentum();
  o->weight_decay = p.weight_decay();
  o->beta1 = p.beta1();
  o->beta2 = p.beta2();
  o->eps = p.eps();
  return absl::OkStatus();
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
  p.set_update_scale(step.update_scale);
  p.set_learning_rate(step.learning_rate);
  p.set_buffer_blend(step.buffer_blend);
  p.set_momentum(step.momentum);
  return p;
}

ReplicatedStep StepFromProto(const v1::ShardStep& p) {
  ReplicatedStep step;
  step.version = p.version();
  for (const v1::ShardStepMember& m : p.members()) step.members.push_back({m.worker_id(), m.model_version(), m.weight()});
  step.update_scale = p.update_scale();
  step.learning_rate = p.learning_rate();
  step.buffer_blend = p.buffer_blend();
  step.momentum = p.momentum();
  return step;
}

}  // namespace server
}  // namespace omnilearn
