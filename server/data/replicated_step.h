// One optimizer step as a sharded job's coordinator takes it and its shards replay it on
// their slices (docs/SHARDING.md): the members whose gradients it sums and the step's
// scalars. The coordinator's core produces it (control/parameter_server_core.h), the
// shard's slice applies it (data/shard_core.h), rpc/shard_wire.h carries it.
#ifndef OMNILEARN_SERVER_DATA_REPLICATED_STEP_H_
#define OMNILEARN_SERVER_DATA_REPLICATED_STEP_H_

#include <cstdint>
#include <vector>

#include "common/worker_id.h"
#include "server/data/step_settings.h"

namespace omnilearn {
namespace server {

struct ReplicatedStep {
  uint64_t version = 0;  // before the step
  struct Member {
    WorkerId id = 0;
    uint64_t model_version = 0;  // its gradient's
    double weight = 1;
  };
  std::vector<Member> members;
  // The coordinator's settings (update = sum(weight * gradient) * update_scale), with the
  // rate the step took (settings.learning_rate: schedule and per-push scale applied).
  StepSettings settings;
  double predict_steps = 0;  // ParameterStore::Predict's, after the step
};

// A sync round's step as the coordinator decides it ahead of the round's data (a sharded job
// with --shard_steps_ahead): the version the round's gradients are of, the workers due in it,
// the rate its step takes and how it weighs them. A shard whose slices of every one of these
// members came steps at once (data/shard_core.h), and the coordinator's command for the
// round confirms that step, or finds it took other members (the job then goes back to its
// common checkpoint).
struct RoundAhead {
  uint64_t version = 0;
  std::vector<WorkerId> members;
  double learning_rate = 0;
  bool weigh_by_batch = true;  // false: --aggregation=mean (every member weighs 1)
};

// A sync round's step from its members: the weighted mean, sum(w_k g_k) / sum(w_k).
double MeanScale(const std::vector<ReplicatedStep::Member>& members);

// Whether two steps take the same members (in any order) with the same weights and scalars.
bool SameStep(const ReplicatedStep& a, const ReplicatedStep& b);

// The model's step history as one digest: every step's version and the members whose
// gradients it took (id, model version, weight), chained from `history` (the digest up to
// the version before). Slices of one model have equal histories at equal versions: a
// digest that differs names a slice that took other members in some step. The same in
// every process (FNV-1a over the fields, the members in id order); 0 is "not known" (a
// checkpoint of an earlier release), which no chain yields.
uint64_t ExtendHistory(uint64_t history, uint64_t version, std::vector<ReplicatedStep::Member> members);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_REPLICATED_STEP_H_
