// The samples of a mini-batch as the server assigns them and the workers train them:
// ids (indices into the training set) by epoch. One type on both sides of the wire.
#ifndef OMNILEARN_COMMON_SAMPLE_SPAN_H_
#define OMNILEARN_COMMON_SAMPLE_SPAN_H_

#include <cstdint>
#include <vector>

namespace omnilearn {

// Sample ids of one epoch, in training order.
struct SampleSpan {
  uint64_t epoch = 0;
  std::vector<uint64_t> ids;
  bool operator==(const SampleSpan& o) const { return epoch == o.epoch && ids == o.ids; }
};

// One mini-batch's samples: usually one span, two across an epoch boundary.
using SampleBatch = std::vector<SampleSpan>;

inline int64_t CountSamples(const SampleBatch& batch) {
  int64_t n = 0;
  for (const SampleSpan& s : batch) n += static_cast<int64_t>(s.ids.size());
  return n;
}

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_SAMPLE_SPAN_H_
