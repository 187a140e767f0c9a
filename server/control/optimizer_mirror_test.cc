#include "server/control/optimizer_mirror.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

ModelLayout Layout() {
  return *ModelLayout::Create({TensorSpec{"w", {4}}, TensorSpec{"b", {2}}, TensorSpec{"bn.mean", {2}, true}});
}

WantedOptimizer AdamWTwoGroups() {
  WantedOptimizer w;
  w.kind = OptimizerKind::kAdamW;
  w.lr = 0.003;
  w.weight_decay = 0.01;
  w.beta1 = 0.9;
  w.beta2 = 0.95;
  w.eps = 1e-8;
  w.groups = {{{"w"}, 0.003, 0.01}, {{"b"}, 0.003, 0}};
  return w;
}

TEST_CASE("a worker's optimizer replaces the flags' kind, rates and groups; the schedule stays", "[mirror]") {
  OptimizerOptions flags;  // sgd
  flags.clip_grad_norm = 1;
  flags.warmup_steps = 10;
  absl::StatusOr<OptimizerOptions> o = MirrorOptimizer(AdamWTwoGroups(), flags, Layout());
  REQUIRE(o.ok());
  REQUIRE(o->kind == OptimizerKind::kAdamW);
  REQUIRE(o->learning_rate == 0.003);
  REQUIRE(o->beta2 == 0.95);
  REQUIRE(o->clip_grad_norm == 1);
  REQUIRE(o->warmup_steps == 10);
  REQUIRE(o->groups.size() == 2);
  REQUIRE(o->groups[0].tensors == std::vector<int>{0});
  REQUIRE(o->groups[1].tensors == std::vector<int>{1});
  REQUIRE(o->groups[1].weight_decay == 0);
}

TEST_CASE("a worker's optimizer with a bad value or an unknown tensor is refused, naming it", "[mirror]") {
  WantedOptimizer w = AdamWTwoGroups();
  w.groups[1].tensors = {"bias"};
  REQUIRE(absl::StrContains(MirrorOptimizer(w, {}, Layout()).status().message(),
                            "param group 1 names 'bias', not in the model"));
  w = AdamWTwoGroups();
  w.beta1 = 1.5;
  REQUIRE(absl::StrContains(MirrorOptimizer(w, {}, Layout()).status().message(), "betas must be in [0, 1)"));
  w = AdamWTwoGroups();
  w.lr = 0;
  REQUIRE(MirrorOptimizer(w, {}, Layout()).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a later worker's optimizer must run the job's steps", "[mirror]") {
  const OptimizerOptions job = *MirrorOptimizer(AdamWTwoGroups(), {}, Layout());
  REQUIRE(CheckSameOptimizer(job, job, "the first worker's").ok());
  WantedOptimizer other = AdamWTwoGroups();
  other.groups[1].weight_decay = 0.01;
  const absl::Status s = CheckSameOptimizer(*MirrorOptimizer(other, {}, Layout()), job, "the first worker's");
  REQUIRE(s.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(absl::StrContains(s.message(), "1: 1 tensors lr=0.003 weight_decay=0.01"));
  REQUIRE(absl::StrContains(s.message(), "(the first worker's)"));
  OptimizerOptions sgd;  // momentum differs from an SGD job's: refused; Adam's betas do not count for SGD
  OptimizerOptions sgd_other = sgd;
  sgd_other.beta1 = 0.5;
  REQUIRE(CheckSameOptimizer(sgd_other, sgd, "flags").ok());
  sgd_other.momentum = 0.5;
  REQUIRE_FALSE(CheckSameOptimizer(sgd_other, sgd, "flags").ok());
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
