// The optimizers' table: names, hyperparameters and their ranges, state, as torch.optim has them.
#include "server/data/optimizer_rules.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

double At(const HyperValues& h, Hp hp) { return h[static_cast<int>(hp)]; }

TEST_CASE("Every optimizer is found by its name, torch's class name too") {
  for (const OptimizerRule& rule : OptimizerRules()) {
    REQUIRE(ParseOptimizer(rule.name).value() == rule.kind);
    REQUIRE(ParseOptimizer(rule.torch_class).value() == rule.kind);
    REQUIRE(OptimizerName(rule.kind) == rule.name);
    REQUIRE(&RuleOf(rule.kind) == &rule);
  }
  REQUIRE(absl::StrContains(ParseOptimizer("lbfgs").status().message(), "want one of sgd, adam, adamw"));
}

TEST_CASE("Hyperparameters take torch's defaults, then the job's, then the group's") {
  const HyperValues h = *ResolveHyper(OptimizerKind::kRMSprop, {{"momentum", 0.9}}, {{"centered", 1}});
  REQUIRE(At(h, Hp::kAlpha) == 0.99);
  REQUIRE(At(h, Hp::kEps) == 1e-8);
  REQUIRE(At(h, Hp::kMomentum) == 0.9);
  REQUIRE(At(h, Hp::kCentered) == 1);
  REQUIRE(At(*ResolveHyper(OptimizerKind::kAdadelta, {}, {}), Hp::kEps) == 1e-6);
  REQUIRE(At(*ResolveHyper(OptimizerKind::kAdagrad, {}, {}), Hp::kEps) == 1e-10);
}

TEST_CASE("A hyperparameter the rule does not read, or out of its range, is refused by name") {
  auto refused = [](OptimizerKind kind, HyperMap job, HyperMap group, const char* says) {
    absl::StatusOr<HyperValues> h = ResolveHyper(kind, job, group);
    INFO(h.status().message());
    REQUIRE(absl::StrContains(h.status().message(), says));
  };
  refused(OptimizerKind::kSgd, {{"beta1", 0.9}}, {}, "SGD has no option 'beta1'");
  refused(OptimizerKind::kAdam, {}, {{"rho", 0.9}}, "Adam has no option 'rho' (a param group's)");
  refused(OptimizerKind::kAdam, {{"amsgrad", 0.5}}, {}, "amsgrad = 0.5 is out of range (a flag: 0 or 1)");
  refused(OptimizerKind::kSgd, {{"momentum", 1}}, {}, "momentum = 1 is out of range");
  refused(OptimizerKind::kRprop, {{"etaplus", 1}}, {}, "etaplus = 1 is out of range");
  refused(OptimizerKind::kSgd, {{"nesterov", 1}}, {}, "nesterov needs momentum > 0 and dampening 0");
  refused(OptimizerKind::kRprop, {{"step_size_min", 2}, {"step_size_max", 1}}, {}, "step_size_min is above");
  refused(OptimizerKind::kMuon, {{"ns_steps", 2.5}}, {}, "Muon's ns_steps must be a whole number");
  refused(OptimizerKind::kMuon, {{"adjust_lr_fn", 4}}, {}, "adjust_lr_fn = 4 is out of range");
  refused(OptimizerKind::kFtrl, {{"learning_rate_power", 0.5}}, {}, "learning_rate_power = 0.5 is out of range");
}

TEST_CASE("Options are written as torch.optim writes them, pairs as pairs") {
  const HyperValues h = *ResolveHyper(OptimizerKind::kRprop, {}, {});
  REQUIRE(DescribeHyper(OptimizerKind::kRprop, h) == "etas=(0.5, 1.2), step_sizes=(1e-06, 50), maximize=False");
  REQUIRE(DescribeHyper(OptimizerKind::kAdam, *ResolveHyper(OptimizerKind::kAdam, {{"amsgrad", 1}}, {})) ==
          "betas=(0.9, 0.999), eps=1e-08, amsgrad=True, maximize=False");
  // Keras's form is ours, not torch's: named only when on.
  REQUIRE(DescribeHyper(OptimizerKind::kRMSprop, *ResolveHyper(OptimizerKind::kRMSprop, {{"keras", 1}}, {})) ==
          "alpha=0.99, eps=1e-08, momentum=0, centered=False, maximize=False, keras=True");
}

TEST_CASE("The state a job keeps follows the options of its groups") {
  const HyperValues plain = *ResolveHyper(OptimizerKind::kRMSprop, {}, {});
  const HyperValues both = *ResolveHyper(OptimizerKind::kRMSprop, {{"momentum", 0.5}, {"centered", 1}}, {});
  REQUIRE(StateNames(OptimizerKind::kRMSprop, {plain}) == std::vector<std::string>{"square_avg"});
  REQUIRE(StateNames(OptimizerKind::kRMSprop, {plain, both}) ==
          std::vector<std::string>{"square_avg", "momentum_buffer", "grad_avg"});
  const HyperValues ams = *ResolveHyper(OptimizerKind::kAdam, {{"amsgrad", 1}}, {});
  REQUIRE(StateNames(OptimizerKind::kAdam, {ams}).size() == 3);
  REQUIRE(StateNames(OptimizerKind::kSgd, {*ResolveHyper(OptimizerKind::kSgd, {}, {})}) ==
          std::vector<std::string>{"momentum"});
  REQUIRE(StateNames(OptimizerKind::kLion, {*ResolveHyper(OptimizerKind::kLion, {}, {})}) ==
          std::vector<std::string>{"exp_avg"});
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
