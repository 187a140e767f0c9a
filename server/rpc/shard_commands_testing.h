// For tests: what a coordinator sends a shard, for a two-tensor model cut into 4
// partitions of 16 floats over 2 slices (slice 1 the shard's).
#ifndef OMNILEARN_SERVER_RPC_SHARD_COMMANDS_TESTING_H_
#define OMNILEARN_SERVER_RPC_SHARD_COMMANDS_TESTING_H_

#include <numeric>
#include <vector>

#include "common/shard_map.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.pb.h"
#include "server/rpc/shard_wire.h"

namespace omnilearn {
namespace server {
namespace testing {

inline constexpr int64_t kPartition = 64;  // bytes: 16 floats

inline ModelLayout Model() { return *ModelLayout::Create({{"a", {32}}, {"b", {32}}}); }
inline ShardMap Map() { return *ShardMap::Plan(Model(), 2, kPartition); }

// The init of slice `index` (sync, default optimizer, a round timeout of 5 s).
inline v1::ShardCommand Init(uint32_t index = 1) {
  v1::ShardCommand c;
  v1::ShardInit* init = c.mutable_init();
  init->set_index(index);
  *init->mutable_layout() = LayoutToProto(Model());
  *init->mutable_optimizer() = OptimizerToProto(OptimizerOptions(), absl::Seconds(5));
  init->set_fingerprint(Map().fingerprint());
  init->set_sync(true);
  return c;
}

// Slice 1's values, 0, 1, 2, ..., as the coordinator's chunks.
inline std::vector<v1::ShardCommand> Values() {
  std::vector<float> values(Map().slice_elements(1));
  std::iota(values.begin(), values.end(), 0.0f);
  std::vector<v1::ShardCommand> out;
  ForEachChunk(Map().slice_layout(1), values.data(), 32, [&](v1::TensorChunk& chunk) {
    v1::ShardCommand c;
    *c.mutable_chunk() = chunk;
    out.push_back(c);
    return true;
  });
  return out;
}

// A step from `version` at rate 0.1, with no members.
inline v1::ShardCommand Step(uint64_t version) {
  v1::ShardCommand c;
  v1::ShardStep* step = c.mutable_step();
  step->set_version(version);
  step->set_update_scale(1);
  step->set_learning_rate(0.1);
  step->set_buffer_blend(1);
  step->set_momentum(-1);
  return c;
}

}  // namespace testing
}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_RPC_SHARD_COMMANDS_TESTING_H_
