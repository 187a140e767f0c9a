#include "server/data/round_sum.h"

#include <algorithm>

#include "common/parallel_for.h"

namespace omnilearn {
namespace server {
namespace {

// sum (+)= b * g over [lo, hi). A free function with restrict parameters, so that GCC
// vectorizes it.
void Accumulate(float* __restrict sum, const float* __restrict g, int64_t lo, int64_t hi, float b, bool first) {
  if (first) {
    for (int64_t i = lo; i < hi; ++i) sum[i] = b * g[i];
  } else {
    for (int64_t i = lo; i < hi; ++i) sum[i] += b * g[i];
  }
}

}  // namespace

void RoundSum::Start(int64_t elements) {
  sum_.resize(elements);
  const int64_t n = Stripes();
  if (n > allocated_stripes_) {
    stripes_ = std::make_unique<Stripe[]>(n);
    allocated_stripes_ = n;
  }
  for (int64_t i = 0; i < n; ++i) {
    absl::MutexLock lock(&stripes_[i].mu);
    stripes_[i].written = false;
  }
}

void RoundSum::Add(absl::Span<const float> values, float weight, uint64_t rotation) {
  const int64_t n = Stripes();
  const int64_t size = static_cast<int64_t>(sum_.size());
  const int64_t first_stripe = static_cast<int64_t>(rotation % static_cast<uint64_t>(std::max<int64_t>(n, 1)));
  ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t s = (k + first_stripe) % n;
      Stripe& stripe = stripes_[s];
      absl::MutexLock lock(&stripe.mu);
      const int64_t lo = s * kStripeElements;
      Accumulate(sum_.data(), values.data(), lo, std::min(size, lo + kStripeElements), weight, !stripe.written);
      stripe.written = true;
    }
  });
}

void RoundSum::Release() {
  std::vector<float>().swap(sum_);
  stripes_.reset();
  allocated_stripes_ = 0;
}

}  // namespace server
}  // namespace omnilearn
