// Muon's orthogonalization against what it promises: a matrix's singular values brought
// near one whatever their spread, its singular vectors kept, the tall case by its transpose.
#include "server/data/newton_schulz.h"

#include <cmath>
#include <random>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

// x x^T of a rows x cols matrix.
std::vector<double> Gram(const std::vector<float>& x, int rows, int cols) {
  std::vector<double> g(rows * rows, 0.0);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < rows; ++j) {
      for (int k = 0; k < cols; ++k) g[i * rows + j] += static_cast<double>(x[i * cols + k]) * x[j * cols + k];
    }
  }
  return g;
}

// U diag(s) V^T with U = I (rows x rows) and V's first rows columns a permutation: each
// row i is s_i times a distinct unit vector, so the singular values are s.
std::vector<float> Spread(int rows, int cols, const std::vector<float>& s) {
  std::vector<float> x(rows * cols, 0.0f);
  for (int i = 0; i < rows; ++i) x[i * cols + (i * 2) % cols] = s[i];
  return x;
}

TEST_CASE("singular values spread over three decades end near one; the directions stay") {
  const std::vector<float> s = {10.0f, 1.0f, 0.1f, 0.03f};
  std::vector<float> x = Spread(4, 9, s);
  Orthogonalize(NewtonSchulz{}, 4, 9, x.data());
  const std::vector<double> g = Gram(x, 4, 9);
  for (int i = 0; i < 4; ++i) {
    INFO("singular value " << i << ": " << std::sqrt(g[i * 4 + i]));
    REQUIRE(std::sqrt(g[i * 4 + i]) > 0.5);  // Muon's quintic: within about [0.5, 1.5]
    REQUIRE(std::sqrt(g[i * 4 + i]) < 1.5);
    for (int j = 0; j < 4; ++j) {
      if (j != i) REQUIRE(std::abs(g[i * 4 + j]) < 1e-6);  // still orthogonal rows
    }
    REQUIRE(x[i * 9 + (i * 2) % 9] > 0);  // the same direction and sign
  }
}

TEST_CASE("a tall matrix is orthogonalized as its transpose is") {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::vector<float> wide(3 * 7), tall(7 * 3);
  for (float& v : wide) v = normal(gen);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 7; ++j) tall[j * 3 + i] = wide[i * 7 + j];
  }
  Orthogonalize(NewtonSchulz{}, 3, 7, wide.data());
  Orthogonalize(NewtonSchulz{}, 7, 3, tall.data());
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 7; ++j) REQUIRE(tall[j * 3 + i] == wide[i * 7 + j]);
  }
}

TEST_CASE("a zero matrix stays zero: torch's eps floor, Keras's eps added") {
  for (bool added : {false, true}) {
    NewtonSchulz ns;
    ns.eps_added = added;
    std::vector<float> x(6, 0.0f);
    Orthogonalize(ns, 2, 3, x.data());
    for (float v : x) REQUIRE(v == 0.0f);
  }
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
