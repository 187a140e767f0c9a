#include "worker/trainer/optimizer_flags.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/torch_optim_defaults.h"

namespace omnilearn {
namespace worker {
namespace {

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat("--", what)); }

// torch.optim's betas, or the flag's "B1,B2".
absl::Status ParseBetas(const std::string& text, OptimizerChoice* o) {
  o->beta1 = torch_optim::kBeta1;
  o->beta2 = torch_optim::kBeta2;
  if (text.empty()) return absl::OkStatus();
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], &o->beta1) || !absl::SimpleAtod(parts[1], &o->beta2)) {
    return Bad(absl::StrCat("betas=", text, ": want B1,B2 (e.g. 0.9,0.999)"));
  }
  return absl::OkStatus();
}

// Group 0: every parameter but those ending with a no_decay suffix, which form group 1.
absl::Status SplitGroups(const std::vector<std::string>& no_decay, const std::vector<std::string>& names,
                         OptimizerChoice* o) {
  OptimizerChoice::Group decay{{}, o->lr, o->weight_decay}, rest{{}, o->lr, 0};
  for (const std::string& name : names) {
    bool exempt = false;
    for (const std::string& suffix : no_decay) exempt = exempt || absl::EndsWith(name, suffix);
    (exempt ? rest : decay).tensors.push_back(name);
  }
  if (rest.tensors.empty() || decay.tensors.empty()) {
    return Bad(absl::StrCat("no_decay=", absl::StrJoin(no_decay, ","), ": ", rest.tensors.empty() ? "no" : "every",
                            " parameter of the model ends with one of them"));
  }
  o->groups = {std::move(decay), std::move(rest)};
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<OptimizerChoice>> OptimizerFromFlags(const OptimizerFlags& f,
                                                                  const std::vector<std::string>& parameter_names) {
  if (f.kind.empty()) {
    if (f.lr >= 0 || f.momentum >= 0 || f.weight_decay >= 0 || !f.betas.empty() || f.eps >= 0 || !f.no_decay.empty()) {
      return Bad(
          "lr, momentum, weight_decay, betas, eps and no_decay set the worker's own optimizer: give --optimizer");
    }
    return std::nullopt;
  }
  const bool sgd = f.kind == "sgd";
  if (!sgd && f.kind != "adam" && f.kind != "adamw")
    return Bad(absl::StrCat("optimizer=", f.kind, ": want sgd, adam or adamw"));
  if (sgd && (!f.betas.empty() || f.eps >= 0)) return Bad("betas and eps are Adam's and AdamW's, not SGD's");
  if (!sgd && f.momentum >= 0) return Bad("momentum is SGD's (Adam and AdamW take --betas)");
  OptimizerChoice o;
  o.kind = f.kind;
  o.lr = f.lr >= 0 ? f.lr : torch_optim::kLearningRate;
  o.momentum = sgd && f.momentum >= 0 ? f.momentum : torch_optim::kMomentum;
  o.weight_decay = f.weight_decay >= 0
                       ? f.weight_decay
                       : (f.kind == "adamw" ? torch_optim::kAdamWWeightDecay : torch_optim::kWeightDecay);
  if (!sgd) {
    if (absl::Status s = ParseBetas(f.betas, &o); !s.ok()) return s;
    o.eps = f.eps >= 0 ? f.eps : torch_optim::kEps;
  }
  if (!f.no_decay.empty()) {
    if (absl::Status s = SplitGroups(f.no_decay, parameter_names, &o); !s.ok()) return s;
  }
  return std::optional<OptimizerChoice>(std::move(o));
}

}  // namespace worker
}  // namespace omnilearn
