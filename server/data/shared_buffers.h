// Model-sized buffers the parameter store hands out shared (snapshots, optimizer state,
// predictions) and replaces at a step: a replaced buffer is retired here, and the next
// one is taken from those retired that no reader holds any more, so a reader that keeps
// one across rounds (an in-memory checkpoint) costs no allocation and no page faults.
// Unlike buffer_pool.h (owned buffers given back), these are reused once let go.
#ifndef OMNILEARN_SERVER_DATA_SHARED_BUFFERS_H_
#define OMNILEARN_SERVER_DATA_SHARED_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace omnilearn {
namespace server {

// Not thread-safe: its owner's lock guards it.
class SharedBuffers {
 public:
  using Buffer = std::shared_ptr<std::vector<float>>;

  // Keeps `buffer` (null: nothing) until a Take finds it let go.
  void Retire(Buffer buffer);
  // The newest retired buffer of `size` values that no reader holds (its contents are
  // whatever they were), else a new zeroed one, counted in allocated(). Retired buffers
  // still held stay; of those let go, only the one taken survives (memory is not kept
  // beyond the step's peak).
  Buffer Take(size_t size);
  // Forgets every retired buffer (a new model).
  void Clear() { retired_.clear(); }
  uint64_t allocated() const { return allocated_; }
  size_t retired() const { return retired_.size(); }

 private:
  std::vector<Buffer> retired_;  // oldest first
  uint64_t allocated_ = 0;
};

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DATA_SHARED_BUFFERS_H_
