// The model cut into partitions and the partitions spread over the data plane's shards
// (BytePS's rule): the model's flat order is cut into k x shards contiguous partitions of
// near-equal size (one element apart at most), k the fewest that keeps a partition within
// `partition_bytes`, or with kAutoPartitionBytes within the model's share of
// kAutoPartitionsPerShard partitions a shard, held between 64 KiB and 4 MiB (so that every
// layer, and so every phase of a round, spreads over every shard's link: few large
// partitions put a big layer's bytes on some links more than others, the more so the more
// shards; bench/iteration_bound.py); a partition is a run of pieces of tensors, cut at the
// tensors' bounds. A map of whole tensors (an optimizer that reads whole tensors: Adafactor,
// Lamb, Muon) cuts none: each tensor is a partition, the largest first to the shard that
// holds least, and each piece keeps its tensor's shape. Partition j goes to shard j mod shards, so every shard holds
// the same bytes (k elements apart at most: a host's link carries no more than another's) and pieces from the whole
// model. The map is a pure function of (layout, shards, partition bytes): the coordinator, every shard and every worker
// compute the same one, and its fingerprint tells when two processes do not. No gRPC, no torch.
#ifndef OMNILEARN_COMMON_SHARD_MAP_H_
#define OMNILEARN_COMMON_SHARD_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_layout.h"

namespace omnilearn {

// Elements [begin, end) of the layout's tensor `tensor`; `flat` is where `begin` sits in
// the whole model's flat vector (layout order).
struct ShardPiece {
  int tensor = 0;
  int64_t begin = 0, end = 0;
  int64_t flat = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const ShardPiece& o) const {
    return tensor == o.tensor && begin == o.begin && end == o.end && flat == o.flat;
  }
};

// Immutable after Plan. Thread-safe (const).
class ShardMap {
 public:
  // partition_bytes kAutoPartitionBytes: the size is the model's over kAutoPartitionsPerShard
  // x shards, within [kMinAutoPartitionBytes, kMaxAutoPartitionBytes].
  static constexpr int64_t kAutoPartitionBytes = 0;
  static constexpr int kAutoPartitionsPerShard = 16;
  static constexpr int64_t kMinAutoPartitionBytes = int64_t{64} << 10;
  static constexpr int64_t kMaxAutoPartitionBytes = int64_t{4} << 20;
  static constexpr int kMaxShards = 1024;

  // InvalidArgument: shards outside [1, kMaxShards], partition_bytes neither
  // kAutoPartitionBytes nor at least one float, or a model of fewer elements than shards (a
  // shard would hold nothing).
  // whole_tensors: no tensor cut (InvalidArgument: fewer non-empty tensors than shards).
  static absl::StatusOr<ShardMap> Plan(const ModelLayout& layout, int shards,
                                       int64_t partition_bytes = kAutoPartitionBytes, bool whole_tensors = false);

  int shards() const { return static_cast<int>(slices_.size()); }
  bool whole_tensors() const { return whole_tensors_; }
  int partitions() const { return partitions_; }
  // The shard's pieces in layout order (tensor, then begin): its slice's flat order.
  const std::vector<ShardPiece>& slice(int shard) const { return slices_[shard]; }
  int64_t slice_elements(int shard) const { return slice_elements_[shard]; }
  int64_t total_elements() const { return total_; }
  // The shard's slice as a model of its own: one flat tensor per piece, named
  // "tensor@begin" (a buffer where its tensor is one), in the slice's flat order. A shard's
  // server holds this layout, and a worker pushes and pulls the slice with it.
  const ModelLayout& slice_layout(int shard) const { return slice_layouts_[shard]; }
  // Stable across processes and builds (FNV-1a over the tensors and the pieces).
  uint64_t fingerprint() const { return fingerprint_; }

  // The shard's slice out of the whole model (flat, layout order), and back into it.
  // `slice` holds slice_elements(shard) floats, `model` total_elements().
  void Gather(int shard, absl::Span<const float> model, absl::Span<float> slice) const;
  void Scatter(int shard, absl::Span<const float> slice, absl::Span<float> model) const;

  // "3 shards, 27 partitions of 0.45 MB; MB per shard: 4.1, 4.0, 4.0", for logs and errors.
  std::string DebugString() const;

 private:
  std::vector<std::vector<ShardPiece>> slices_;
  std::vector<int64_t> slice_elements_;
  std::vector<ModelLayout> slice_layouts_;
  int partitions_ = 0;
  bool whole_tensors_ = false;
  int64_t total_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_SHARD_MAP_H_
