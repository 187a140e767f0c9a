#include "common/shard_map.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <queue>
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

// Elements per partition: at most partition_bytes, and fewer when the model is too small to
// give every shard about four partitions (the balance needs several per shard).
int64_t PartitionElements(int64_t total, int shards, int64_t partition_bytes) {
  const int64_t wanted = partition_bytes / static_cast<int64_t>(sizeof(float));
  const int64_t fine = (total + 4 * int64_t{shards} - 1) / (4 * int64_t{shards});
  return std::max<int64_t>(1, std::min(wanted, fine));
}

// Layout order: a tensor of more than `per` elements becomes ceil(n / per) near-equal
// partitions of its own; smaller ones fill a partition until the next would overflow it.
std::vector<Partition> Cut(const ModelLayout& layout, int64_t per) {
  std::vector<Partition> parts;
  Partition group;
  int64_t in_group = 0;
  auto close_group = [&] {
    if (group.empty()) return;
    parts.push_back(std::move(group));
    group.clear();
    in_group = 0;
  };
  for (int t = 0; t < static_cast<int>(layout.tensors().size()); ++t) {
    const int64_t n = layout.size(t), flat = layout.offset(t);
    if (n == 0) continue;
    if (n > per) {
      close_group();
      const int64_t k = (n + per - 1) / per, base = n / k, extra = n % k;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t begin = i * base + std::min(i, extra);
        const int64_t end = begin + base + (i < extra ? 1 : 0);
        parts.push_back({ShardPiece{t, begin, end, flat + begin}});
      }
      continue;
    }
    if (in_group + n > per) close_group();
    group.push_back(ShardPiece{t, 0, n, flat});
    in_group += n;
  }
  close_group();
  return parts;
}

// Largest partition first, each to the shard holding the fewest elements (the lowest index
// on a tie); then every slice in layout order.
std::vector<std::vector<ShardPiece>> Assign(const std::vector<Partition>& parts, int shards) {
  std::vector<size_t> order(parts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return Elements(parts[a]) > Elements(parts[b]); });
  using Load = std::pair<int64_t, int>;  // (elements, shard)
  std::priority_queue<Load, std::vector<Load>, std::greater<Load>> lightest;
  for (int s = 0; s < shards; ++s) lightest.push({0, s});
  std::vector<std::vector<ShardPiece>> slices(shards);
  for (size_t i : order) {
    Load load = lightest.top();
    lightest.pop();
    slices[load.second].insert(slices[load.second].end(), parts[i].begin(), parts[i].end());
    load.first += Elements(parts[i]);
    lightest.push(load);
  }
  for (auto& slice : slices) {
    std::sort(slice.begin(), slice.end(), [](const ShardPiece& a, const ShardPiece& b) { return a.flat < b.flat; });
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

uint64_t Fingerprint(const ModelLayout& layout, const std::vector<std::vector<ShardPiece>>& slices) {
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
  return h.value();
}

// One flat tensor per piece, named "tensor@begin", a buffer where its tensor is one.
ModelLayout SliceLayoutOf(const ModelLayout& layout, const std::vector<ShardPiece>& slice) {
  std::vector<TensorSpec> specs;
  specs.reserve(slice.size());
  for (const ShardPiece& p : slice) {
    const TensorSpec& t = layout.tensors()[p.tensor];
    specs.push_back(TensorSpec{absl::StrCat(t.name, "@", p.begin), {p.size()}, t.buffer});
  }
  absl::StatusOr<ModelLayout> out = ModelLayout::Create(std::move(specs));
  // Never fails: (tensor, begin) is unique, every piece holds an element.
  if (!out.ok()) ABSL_RAW_LOG(FATAL, "slice layout: %s", out.status().ToString().c_str());
  return *std::move(out);
}

}  // namespace

absl::StatusOr<ShardMap> ShardMap::Plan(const ModelLayout& layout, int shards, int64_t partition_bytes) {
  if (shards < 1 || shards > kMaxShards) {
    return absl::InvalidArgumentError(absl::StrFormat("%d shards: want 1 to %d", shards, kMaxShards));
  }
  if (partition_bytes < static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a partition of %d bytes holds no parameter: want at least 4", partition_bytes));
  }
  if (layout.total_elements() < shards) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model has %d parameters, fewer than the %d shards: a shard would hold nothing", layout.total_elements(),
        shards));
  }
  const std::vector<Partition> parts =
      Cut(layout, PartitionElements(layout.total_elements(), shards, partition_bytes));
  ShardMap map;
  map.slices_ = Assign(parts, shards);
  map.partitions_ = static_cast<int>(parts.size());
  map.total_ = layout.total_elements();
  for (const auto& slice : map.slices_) map.slice_elements_.push_back(Elements(slice));
  map.fingerprint_ = Fingerprint(layout, map.slices_);
  for (const auto& slice : map.slices_) map.slice_layouts_.push_back(SliceLayoutOf(layout, slice));
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
  return absl::StrFormat("%d shards, %d partitions; MB per shard: %s", shards(), partitions_,
                         absl::StrJoin(slice_elements_, ", ", [](std::string* out, int64_t n) {
                           absl::StrAppendFormat(out, "%.1f", n * sizeof(float) / 1e6);
                         }));
}

}  // namespace omnilearn
