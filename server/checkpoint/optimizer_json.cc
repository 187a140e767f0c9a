#include "server/checkpoint/optimizer_json.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace omnilearn {
namespace server {
namespace {

using Json = nlohmann::json;

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint: malformed ", what));
}

bool ReadHyper(const Json& j, HyperMap* out) {
  if (!j.is_object()) return false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number()) return false;
    (*out)[it.key()] = it.value().get<double>();
  }
  return true;
}

bool ReadGroup(const Json& j, ParamGroup* g) {
  if (!j.is_object() || !j.contains("tensors") || !j["tensors"].is_array() || !j.contains("lr") ||
      !j["lr"].is_number() || !j.contains("weight_decay") || !j["weight_decay"].is_number() || !j.contains("hyper")) {
    return false;
  }
  for (const Json& t : j["tensors"]) {
    if (!t.is_number_integer()) return false;
    g->tensors.push_back(t.get<int>());
  }
  if (j.contains("names")) {
    if (!j["names"].is_array()) return false;
    for (const Json& n : j["names"]) {
      if (!n.is_string()) return false;
      g->names.push_back(n.get<std::string>());
    }
  }
  g->lr = j["lr"].get<double>();
  g->weight_decay = j["weight_decay"].get<double>();
  return ReadHyper(j["hyper"], &g->hyper);
}

}  // namespace

std::string OptimizerJson(const OptimizerOptions& o) {
  Json groups = Json::array();
  for (const ParamGroup& g : o.groups) {
    groups.push_back({{"tensors", g.tensors},
                      {"names", g.names},
                      {"lr", g.lr},
                      {"weight_decay", g.weight_decay},
                      {"hyper", g.hyper}});
  }
  return Dump({{"kind", OptimizerName(o.kind)},
               {"learning_rate", o.learning_rate},
               {"weight_decay", o.weight_decay},
               {"momentum", o.momentum},
               {"beta1", o.beta1},
               {"beta2", o.beta2},
               {"eps", o.eps},
               {"hyper", o.hyper},
               {"groups", groups}});
}

absl::StatusOr<OptimizerOptions> ParseOptimizerJson(const std::string& text, OptimizerOptions base) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("kind") || !j["kind"].is_string()) {
    return Malformed("optimizer options");
  }
  absl::StatusOr<OptimizerKind> kind = ParseOptimizer(j["kind"].get<std::string>());
  if (!kind.ok()) return kind.status();
  base.kind = *kind;
  for (auto [key, field] : {std::pair<const char*, double*>{"learning_rate", &base.learning_rate},
                            {"weight_decay", &base.weight_decay},
                            {"momentum", &base.momentum},
                            {"beta1", &base.beta1},
                            {"beta2", &base.beta2},
                            {"eps", &base.eps}}) {
    if (!j.contains(key) || !j[key].is_number()) return Malformed("optimizer options");
    *field = j[key].get<double>();
  }
  base.hyper.clear();
  base.groups.clear();
  if (!j.contains("hyper") || !ReadHyper(j["hyper"], &base.hyper) || !j.contains("groups") || !j["groups"].is_array()) {
    return Malformed("optimizer options");
  }
  for (const Json& g : j["groups"]) {
    ParamGroup group;
    if (!ReadGroup(g, &group)) return Malformed("optimizer param group");
    base.groups.push_back(std::move(group));
  }
  if (absl::Status s = ValidateOptimizerOptions(base); !s.ok()) return s;
  return base;
}

std::string ScalarsJson(const OptimizerScalars& scalars) { return Dump(Json(scalars)); }

absl::StatusOr<OptimizerScalars> ParseScalarsJson(const std::string& text) {
  OptimizerScalars out;
  if (text.empty()) return out;
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Malformed("optimizer scalars");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_array()) return Malformed("optimizer scalars");
    for (const Json& v : it.value()) {
      if (!v.is_number()) return Malformed("optimizer scalars");
      out[it.key()].push_back(v.get<double>());
    }
  }
  return out;
}

std::string RatesJson(const std::vector<double>& rates) { return Dump(Json(rates)); }

absl::StatusOr<std::vector<double>> ParseRatesJson(const std::string& text) {
  std::vector<double> out;
  if (text.empty()) return out;
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) return Malformed("group rates");
  for (const Json& v : j) {
    if (!v.is_number()) return Malformed("group rates");
    out.push_back(v.get<double>());
  }
  return out;
}

}  // namespace server
}  // namespace omnilearn
