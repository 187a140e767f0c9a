#include "common/shard_map.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace omnilearn {
namespace {

using Partition = std::vector<ShardPiece>;

int64_t Elements(const Partition& p) {
  int64_t n = 0;
  for (const ShardPiece& piece : p) n += piece.size();
  return n;
}

// Elements a partition may hold: partition_bytes's, or the automatic size's (shard_map.h).
int64_t PartitionElements(int64_t total, int shards, int64_t partition_bytes) {
  constexpr int64_t kFloat = sizeof(float);
  if (partition_bytes != ShardMap::kAutoPartitionBytes) return std::max<int64_t>(1, partition_bytes / kFloat);
  const int64_t share = total / (int64_t{shards} * ShardMap::kAutoPartitionsPerShard);
  return std::clamp(share, ShardMap::kMinAutoPartitionBytes / kFloat, ShardMap::kMaxAutoPartitionBytes / kFloat);
}

// Partitions: the fewest multiple of `shards` whose near-equal share of the model fits in a
// partition's elements, so that every shard gets the same number of them.
int64_t PartitionCount(int64_t total, int shards, int64_t partition_bytes) {
  const int64_t per = PartitionElements(total, shards, partition_bytes);
  const int64_t per_shard = (total + per * shards - 1) / (per * shards);
  return std::min<int64_t>(total, per_shard * shards);
}

// The model's flat order cut into `count` contiguous near-equal partitions (sizes differ by
// at most one element), each broken into pieces at its tensors' bounds.
std::vector<Partition> Cut(const ModelLayout& layout, int64_t count) {
  const int64_t total = layout.total_elements(), base = total / count, extra = total % count;
  std::vector<Partition> parts(count);
  int t = 0;
  int64_t flat = 0;
  for (int64_t j = 0; j < count; ++j) {
    const int64_t end = flat + base + (j < extra ? 1 : 0);
    while (flat < end) {
      while (layout.offset(t) + layout.size(t) <= flat) ++t;  // skips empty tensors too
      const int64_t piece_end = std::min(end, layout.offset(t) + layout.size(t));
      parts[j].push_back(ShardPiece{t, flat - layout.offset(t), piece_end - layout.offset(t), flat});
      flat = piece_end;
    }
  }
  return parts;
}

// Partition j to shard j mod shards: every shard holds pieces from the whole model (a push
// during backward, last layers first, reaches every shard at once), and the shards' sizes
// differ by at most one element per partition. Every slice in layout order.
std::vector<std::vector<ShardPiece>> Assign(const std::vector<Partition>& parts, int shards) {
  std::vector<std::vector<ShardPiece>> slices(shards);
  for (size_t j = 0; j < parts.size(); ++j) {
    slices[j % shards].insert(slices[j % shards].end(), parts[j].begin(), parts[j].end());
  }
  return slices;
}

// Whole tensors: each non-empty one a partition, the largest first to the shard holding
// least (the lowest index on a tie); every slice in layout order.
std::vector<std::vector<ShardPiece>> AssignWhole(const ModelLayout& layout, int shards) {
  std::vector<int> order;
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) {
    if (layout.size(t) > 0) order.push_back(t);
  }
  std::stable_sort(order.begin(), order.end(), [&layout](int a, int b) { return layout.size(a) > layout.size(b); });
  std::vector<std::vector<ShardPiece>> slices(shards);
  std::vector<int64_t> held(shards, 0);
  for (int t : order) {
    const int s = static_cast<int>(std::min_element(held.begin(), held.end()) - held.begin());
    slices[s].push_back(ShardPiece{t, 0, layout.size(t), layout.offset(t)});
    held[s] += layout.size(t);
  }
  for (auto& slice : slices) {
    std::sort(slice.begin(), slice.end(), [](const ShardPiece& a, const ShardPiece& b) { return a.tensor < b.tensor; });
  }
  return slices;
}

class Fnv1a {
 public:
  void Add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 1099511628211ull;
  }
  void Add(int64_t v) { Add(&v, sizeof v); }  // the machines are all little-endian x86-64/arm64
  void Add(const std::string& s) {
    Add(static_cast<int64_t>(s.size()));
    Add(s.data(), s.size());
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 14695981039346656037ull;
};

// A map of whole tensors adds its mark (a cut map's fingerprint is as before it existed).
uint64_t Fingerprint(const ModelLayout& layout, const std::vector<std::vector<ShardPiece>>& slices,
                     bool whole_tensors) {
  Fnv1a h;
  for (const TensorSpec& t : layout.tensors()) {
    h.Add(t.name);
    h.Add(static_cast<int64_t>(t.shape.size()));
    for (int64_t d : t.shape) h.Add(d);
    h.Add(int64_t{t.buffer});
  }
  h.Add(static_cast<int64_t>(slices.size()));
  for (const auto& slice : slices) {
    h.Add(static_cast<int64_t>(slice.size()));
    for (const ShardPiece& p : slice) {
      h.Add(int64_t{p.tensor});
      h.Add(p.begin);
      h.Add(p.end);
    }
  }
  if (whole_tensors) h.Add(std::string("whole tensors"));
  return h.value();
}

// One tensor per piece, named "tensor@begin", a buffer where its tensor is one: flat, or
// shaped as its tensor in a map of whole tensors.
ModelLayout SliceLayoutOf(const ModelLayout& layout, const std::vector<ShardPiece>& slice, bool whole_tensors) {
  std::vector<TensorSpec> specs;
  specs.reserve(slice.size());
  for (const ShardPiece& p : slice) {
    const TensorSpec& t = layout.tensors()[p.tensor];
    specs.push_back(TensorSpec{absl::StrCat(t.name, "@", p.begin),
                               whole_tensors ? t.shape : std::vector<int64_t>{p.size()}, t.buffer});
  }
  absl::StatusOr<ModelLayout> out = ModelLayout::Create(std::move(specs));
  // Never fails: (tensor, begin) is unique, every piece holds an element.
  if (!out.ok()) ABSL_RAW_LOG(FATAL, "slice layout: %s", out.status().ToString().c_str());
  return *std::move(out);
}

}  // namespace

absl::StatusOr<ShardMap> ShardMap::Plan(const ModelLayout& layout, int shards, int64_t partition_bytes,
                                        bool whole_tensors) {
  if (shards < 1 || shards > kMaxShards) {
    return absl::InvalidArgumentError(absl::StrFormat("%d shards: want 1 to %d", shards, kMaxShards));
  }
  if (partition_bytes != kAutoPartitionBytes && partition_bytes < static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a partition of %d bytes holds no parameter: want at least 4, or %d for a size chosen from the model",
        partition_bytes, kAutoPartitionBytes));
  }
  if (layout.total_elements() < shards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the model has %d parameters, fewer than the %d shards: a shard would hold nothing",
                        layout.total_elements(), shards));
  }
  ShardMap map;
  map.whole_tensors_ = whole_tensors;
  if (whole_tensors) {
    map.slices_ = AssignWhole(layout, shards);
    for (const auto& slice : map.slices_) map.partitions_ += static_cast<int>(slice.size());
    if (map.partitions_ < shards) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the model has %d tensors, fewer than the %d shards, and its optimizer reads whole tensors (each on one "
          "shard): a shard would hold nothing",
          map.partitions_, shards));
    }
  } else {
    const std::vector<Partition> parts = Cut(layout, PartitionCount(layout.total_elements(), shards, partition_bytes));
    map.slices_ = Assign(parts, shards);
    map.partitions_ = static_cast<int>(parts.size());
  }
  map.total_ = layout.total_elements();
  for (const auto& slice : map.slices_) map.slice_elements_.push_back(Elements(slice));
  map.fingerprint_ = Fingerprint(layout, map.slices_, whole_tensors);
  for (const auto& slice : map.slices_) map.slice_layouts_.push_back(SliceLayoutOf(layout, slice, whole_tensors));
  return map;
}

void ShardMap::Gather(int shard, absl::Span<const float> model, absl::Span<float> slice) const {
  float* out = slice.data();
  for (const ShardPiece& p : slices_[shard]) {
    std::memcpy(out, model.data() + p.flat, p.size() * sizeof(float));
    out += p.size();
  }
}

void ShardMap::Scatter(int shard, absl::Span<const float> slice, absl::Span<float> model) const {
  const float* in = slice.data();
  for (const ShardPiece& p : slices_[shard]) {
    std::memcpy(model.data() + p.flat, in, p.size() * sizeof(float));
    in += p.size();
  }
}

std::string ShardMap::DebugString() const {
  return absl::StrFormat("%d shards, %d partitions of %.2f MB; MB per shard: %s", shards(), partitions_,
                         total_ * sizeof(float) / 1e6 / std::max(1, partitions_),
                         absl::StrJoin(slice_elements_, ", ", [](std::string* out, int64_t n) {
                           absl::StrAppendFormat(out, "%.1f", n * sizeof(float) / 1e6);
                         }));
}

}  // namespace omnilearn
