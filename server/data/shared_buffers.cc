#include "server/data/shared_buffers.h"

#include <algorithm>
#include <utility>

namespace omnilearn {
namespace server {

void SharedBuffers::Retire(Buffer buffer) {
  if (buffer != nullptr) retired_.push_back(std::move(buffer));
}

SharedBuffers::Buffer SharedBuffers::Take(size_t size) {
  Buffer taken;
  for (auto it = retired_.rbegin(); it != retired_.rend(); ++it) {  // the newest first
    if (it->use_count() > 1) continue;                              // a reader holds it
    if (taken == nullptr && (*it)->size() == size) taken = std::move(*it);
    it->reset();
  }
  retired_.erase(std::remove(retired_.begin(), retired_.end(), nullptr), retired_.end());
  if (taken != nullptr) return taken;
  ++allocated_;
  return std::make_shared<std::vector<float>>(size);
}

}  // namespace server
}  // namespace omnilearn
