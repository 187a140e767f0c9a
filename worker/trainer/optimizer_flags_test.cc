#include "worker/trainer/optimizer_flags.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

const std::vector<std::string> kNames = {"fc1.weight", "fc1.bias", "norm.weight", "fc2.weight", "fc2.bias"};

TEST_CASE("without --optimizer the worker takes the job's; its settings alone are refused", "[optimizer_flags]") {
  REQUIRE_FALSE(OptimizerFromFlags({}, kNames)->has_value());
  OptimizerFlags f;
  f.lr = 0.1;
  REQUIRE(absl::StrContains(OptimizerFromFlags(f, kNames).status().message(), "give --optimizer"));
}

TEST_CASE("what is left out is torch.optim's default for the optimizer", "[optimizer_flags]") {
  OptimizerFlags f;
  f.kind = "sgd";
  f.lr = 20;
  const OptimizerChoice sgd = **OptimizerFromFlags(f, kNames);
  REQUIRE((sgd.lr == 20 && sgd.momentum == 0 && sgd.weight_decay == 0 && sgd.groups.empty()));
  f = {};
  f.kind = "adamw";
  const OptimizerChoice adamw = **OptimizerFromFlags(f, kNames);
  REQUIRE((adamw.lr == 1e-3 && adamw.weight_decay == 1e-2 && adamw.beta1 == 0.9 && adamw.beta2 == 0.999 &&
           adamw.eps == 1e-8));
  f.kind = "adam";
  f.betas = "0.8,0.95";
  const OptimizerChoice adam = **OptimizerFromFlags(f, kNames);
  REQUIRE((adam.weight_decay == 0 && adam.beta1 == 0.8 && adam.beta2 == 0.95));
}

TEST_CASE("--no_decay puts the matching parameters in a second group without decay", "[optimizer_flags]") {
  OptimizerFlags f;
  f.kind = "adamw";
  f.lr = 3e-4;
  f.weight_decay = 0.1;
  f.no_decay = {"bias", "norm.weight"};
  const OptimizerChoice o = **OptimizerFromFlags(f, kNames);
  REQUIRE(o.groups.size() == 2);
  REQUIRE(o.groups[0].tensors == std::vector<std::string>{"fc1.weight", "fc2.weight"});
  REQUIRE((o.groups[0].lr == 3e-4 && o.groups[0].weight_decay == 0.1));
  REQUIRE(o.groups[1].tensors == std::vector<std::string>{"fc1.bias", "norm.weight", "fc2.bias"});
  REQUIRE(o.groups[1].weight_decay == 0);
  f.no_decay = {"gamma"};
  REQUIRE(absl::StrContains(OptimizerFromFlags(f, kNames).status().message(), "no parameter of the model ends with"));
}

TEST_CASE("flags that do not belong to the optimizer are refused, naming them", "[optimizer_flags]") {
  auto refused = [](OptimizerFlags f, const char* says) {
    const absl::Status s = OptimizerFromFlags(f, kNames).status();
    INFO(s.message());
    REQUIRE(absl::StrContains(s.message(), says));
  };
  OptimizerFlags f;
  f.kind = "lion";
  refused(f, "--optimizer=lion: want sgd, adam or adamw");
  f.kind = "sgd";
  f.betas = "0.9,0.99";
  refused(f, "not SGD's");
  f = {};
  f.kind = "adam";
  f.momentum = 0.9;
  refused(f, "momentum is SGD's");
  f = {};
  f.kind = "adam";
  f.betas = "0.9";
  refused(f, "--betas=0.9: want B1,B2");
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
