#include "server/data/replicated_step.h"

#include <algorithm>
#include <cstring>

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

}  // namespace

uint64_t ExtendHistory(uint64_t history, uint64_t version, std::vector<ReplicatedStep::Member> members) {
  std::sort(members.begin(), members.end(),
            [](const ReplicatedStep::Member& a, const ReplicatedStep::Member& b) { return a.id < b.id; });
  uint64_t h = Mix(Mix(Mix(kFnvOffset, history), version), members.size());
  for (const ReplicatedStep::Member& m : members) h = Mix(Mix(Mix(h, m.id), m.model_version), BitsOf(m.weight));
  return h == 0 ? 1 : h;
}

}  // namespace server
}  // namespace omnilearn
