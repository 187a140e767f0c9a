#include "common/grpc_chunks.h"

#include <numeric>
#include <string>
#include <vector>

namespace omnilearn {

grpc::ByteBuffer ChunkBuffer(int field, const TensorSpec& spec, int64_t offset, const void* data, int64_t n,
                             int value_bytes, const std::shared_ptr<const void>& owner) {
  const int64_t bytes = n * value_bytes;
  const std::string prefix = ChunkPrefix(field, spec.name, spec.shape, offset, bytes);
  grpc::Slice slices[2] = {grpc::Slice(prefix), grpc::Slice()};
  if (owner != nullptr) {
    // The slice holds a reference to the owner; gRPC drops it when it is done.
    auto* ref = new std::shared_ptr<const void>(owner);
    slices[1] = grpc::Slice(grpc_slice_new_with_user_data(
                                const_cast<void*>(data), static_cast<size_t>(bytes),
                                [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, ref),
                            grpc::Slice::STEAL_REF);
  } else {
    slices[1] = grpc::Slice(data, static_cast<size_t>(bytes), grpc::Slice::STATIC_SLICE);
  }
  return grpc::ByteBuffer(slices, bytes > 0 ? 2 : 1);
}

bool ForEachChunkBuffer(int field, const ModelLayout& layout, const void* values,
                        const std::shared_ptr<const void>& owner,
                        const std::function<bool(const grpc::ByteBuffer&)>& emit, int value_bytes) {
  std::vector<int> all(layout.tensors().size());
  std::iota(all.begin(), all.end(), 0);
  return ForEachChunkBufferInOrder(field, layout, all, values, owner, emit, value_bytes);
}

bool ForEachChunkBufferInOrder(int field, const ModelLayout& layout, const std::vector<int>& order, const void* values,
                               const std::shared_ptr<const void>& owner,
                               const std::function<bool(const grpc::ByteBuffer&)>& emit, int value_bytes) {
  for (int t : order) {
    const bool sent = ForEachChunkOfTensor(layout, t, values, value_bytes, kMaxChunkBytes,
                                           [&](const TensorSpec& spec, int64_t offset, const void* data, int64_t n) {
                                             return emit(ChunkBuffer(field, spec, offset, data, n, value_bytes, owner));
                                           });
    if (!sent) return false;
  }
  return true;
}

bool ForEachChunkBufferOf(int field, const ModelLayout& layout, int tensor, const void* values,
                          const std::function<bool(const grpc::ByteBuffer&)>& emit, int value_bytes) {
  return ForEachChunkOfTensor(layout, tensor, values, value_bytes, kMaxChunkBytes,
                              [&](const TensorSpec& spec, int64_t offset, const void* data, int64_t n) {
                                return emit(ChunkBuffer(field, spec, offset, data, n, value_bytes, nullptr));
                              });
}

}  // namespace omnilearn
