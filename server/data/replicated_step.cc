#include "server/data/replicated_step.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace omnilearn {
namespace server {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

// FNV-1a over the value's 8 bytes, least significant first (the same on every host).
uint64_t Mix(uint64_t hash, uint64_t value) {
  for (int i = 0; i < 8; ++i) {
    hash ^= (value >> (8 * i)) & 0xff;
    hash *= kFnvPrime;
  }
  return hash;
}

uint64_t BitsOf(double d) {
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

// The members in id order: a step's members are a set, whatever order they were listed in.
std::vector<ReplicatedStep::Member> ById(std::vector<ReplicatedStep::Member> members) {
  std::sort(members.begin(), members.end(),
            [](const ReplicatedStep::Member& a, const ReplicatedStep::Member& b) { return a.id < b.id; });
  return members;
}

}  // namespace

uint64_t ExtendHistory(uint64_t history, uint64_t version, std::vector<ReplicatedStep::Member> members) {
  members = ById(std::move(members));
  uint64_t h = Mix(Mix(Mix(kFnvOffset, history), version), members.size());
  for (const ReplicatedStep::Member& m : members) h = Mix(Mix(Mix(h, m.id), m.model_version), BitsOf(m.weight));
  return h == 0 ? 1 : h;
}

double MeanScale(const std::vector<ReplicatedStep::Member>& members) {
  double total = 0;
  for (const ReplicatedStep::Member& m : members) total += m.weight;
  return total > 0 ? 1.0 / total : 0.0;
}

bool SameStep(const ReplicatedStep& a, const ReplicatedStep& b) {
  const std::vector<ReplicatedStep::Member> ma = ById(a.members), mb = ById(b.members);
  if (a.version != b.version || ma.size() != mb.size()) return false;
  for (size_t i = 0; i < ma.size(); ++i) {
    if (ma[i].id != mb[i].id || ma[i].model_version != mb[i].model_version || ma[i].weight != mb[i].weight) {
      return false;
    }
  }
  const StepSettings &x = a.settings, &y = b.settings;
  return x.learning_rate == y.learning_rate && x.group_rates == y.group_rates && x.update_scale == y.update_scale &&
         x.buffer_blend == y.buffer_blend && x.momentum == y.momentum && x.sample_share == y.sample_share &&
         x.lr_scale == y.lr_scale && a.predict_steps == b.predict_steps;
}

}  // namespace server
}  // namespace omnilearn
