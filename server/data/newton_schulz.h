// Muon's orthogonalization: the quintic Newton-Schulz iteration that maps a matrix G = U S V^T
// to about U V^T (each singular value to within [0.5, 1.5] of one), as torch.optim.Muon and
// keras.optimizers.Muon write it. In float32 with double sums: torch runs it in bfloat16,
// Keras in the variable's type. No gRPC, no torch.
#ifndef OMNILEARN_SERVER_DATA_NEWTON_SCHULZ_H_
#define OMNILEARN_SERVER_DATA_NEWTON_SCHULZ_H_

#include <cstdint>
#include <vector>

namespace omnilearn {
namespace server {

struct NewtonSchulz {
  float a = 3.4445f, b = -4.7750f, c = 2.0315f;  // X <- a X + (b A + c A A) X, A = X X^T
  int steps = 5;
  float eps = 1e-7f;
  // How the matrix is first scaled to a norm of at most one: torch's X / max(|X|, eps), or
  // Keras's X / (|X| + eps).
  bool eps_added = false;
};

// `x` (rows x cols, row-major) orthogonalized in place; the iteration runs on the wider
// side (the transpose when rows > cols), as both frameworks do.
void Orthogonalize(const NewtonSchulz& ns, int64_t rows, int64_t cols, float* x);

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_NEWTON_SCHULZ_H_
