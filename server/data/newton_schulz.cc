#include "server/data/newton_schulz.h"

#include <algorithm>
#include <cmath>

namespace omnilearn {
namespace server {
namespace {

// A row-major matrix.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  float* row(int64_t i) { return v.data() + i * cols; }
  const float* row(int64_t i) const { return v.data() + i * cols; }
};

double Dot(const float* a, const float* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

// x x^T: a symmetric rows x rows matrix, each entry a dot product of two rows.
Matrix Gram(const Matrix& x) {
  Matrix g{x.rows, x.rows, std::vector<float>(x.rows * x.rows)};
  for (int64_t i = 0; i < x.rows; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      g.v[i * x.rows + j] = g.v[j * x.rows + i] = static_cast<float>(Dot(x.row(i), x.row(j), x.cols));
    }
  }
  return g;
}

// One step: x <- a x + (b g + c g g) x, with g = x x^T.
void Iterate(const NewtonSchulz& ns, Matrix* x) {
  const Matrix g = Gram(*x);
  const Matrix gg = Gram(g);  // g is symmetric: g g = g g^T
  Matrix h{g.rows, g.cols, std::vector<float>(g.v.size())};
  for (size_t i = 0; i < h.v.size(); ++i) h.v[i] = ns.b * g.v[i] + ns.c * gg.v[i];
  Matrix next{x->rows, x->cols, std::vector<float>(x->v.size())};
  std::vector<double> acc(x->cols);
  for (int64_t i = 0; i < x->rows; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < x->rows; ++k) {
      const double hik = h.v[i * h.cols + k];
      const float* xk = x->row(k);
      for (int64_t j = 0; j < x->cols; ++j) acc[j] += hik * xk[j];
    }
    const float* xi = x->row(i);
    float* out = next.row(i);
    for (int64_t j = 0; j < x->cols; ++j) out[j] = ns.a * xi[j] + static_cast<float>(acc[j]);
  }
  *x = std::move(next);
}

}  // namespace

void Orthogonalize(const NewtonSchulz& ns, int64_t rows, int64_t cols, float* x) {
  const bool transposed = rows > cols;
  Matrix m{transposed ? cols : rows, transposed ? rows : cols, std::vector<float>(rows * cols)};
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) (transposed ? m.v[j * rows + i] : m.v[i * cols + j]) = x[i * cols + j];
  }
  const float norm = static_cast<float>(std::sqrt(Dot(m.v.data(), m.v.data(), static_cast<int64_t>(m.v.size()))));
  const float scale = ns.eps_added ? norm + ns.eps : std::max(norm, ns.eps);
  for (float& e : m.v) e /= scale;
  for (int s = 0; s < ns.steps; ++s) Iterate(ns, &m);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = transposed ? m.v[j * rows + i] : m.v[i * cols + j];
  }
}

}  // namespace server
}  // namespace omnilearn
