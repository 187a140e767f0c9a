// Writes a small safetensors file with known contents (for the numpy reader test).
#include <cstdio>
#include <vector>

#include "common/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: safetensors_sample PATH\n");
    return 2;
  }
  std::vector<float> w(2 * 3 * 4), b = {0.5f, -0.25f};
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f - 3;
  const float empty = 0;
  absl::Status s = omnilearn::WriteSafetensors(argv[1],
                                               {{"conv.weight", {2, 3, 4}, w.data()},
                                                {"conv.bias", {2}, b.data()},
                                                {"scalar", {}, &b[0]},
                                                {"empty", {0, 3}, &empty}},
                                               {{"omnilearn.version", "7"}, {"text", "ünïcode \"quoted\""}});
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
