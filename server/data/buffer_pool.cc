#include "server/data/buffer_pool.h"

#include <utility>

namespace omnilearn {
namespace server {

std::vector<float> BufferPool::Take() {
  absl::MutexLock lock(&mu_);
  if (buffers_.empty()) return {};
  std::vector<float> b = std::move(buffers_.back());
  buffers_.pop_back();
  return b;
}

void BufferPool::Return(std::vector<float> buffer) {
  if (buffer.capacity() == 0) return;
  absl::MutexLock lock(&mu_);
  if (buffers_.size() < max_buffers_) buffers_.push_back(std::move(buffer));
}

size_t BufferPool::pooled() const {
  absl::MutexLock lock(&mu_);
  return buffers_.size();
}

}  // namespace server
}  // namespace omnilearn
