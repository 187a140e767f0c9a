#include "common/parallel_for.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace omnilearn {
namespace {

// Helper threads that run queued ranges; the caller of Run waits for its own.
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  int threads() const { return static_cast<int>(threads_.size()); }

  void Run(int parts, int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    int pending = parts - 1;
    auto range = [&](int p) { return std::make_pair(n * p / parts, n * (p + 1) / parts); };
    {
      absl::MutexLock lock(&mu_);
      for (int p = 1; p < parts; ++p) queue_.push_back(Task{&fn, range(p).first, range(p).second, &pending});
    }
    fn(range(0).first, range(0).second);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* left) { return *left == 0; }, &pending));
  }

 private:
  struct Task {
    const std::function<void(int64_t, int64_t)>* fn;
    int64_t begin, end;
    int* pending;
  };

  void Loop() {
    while (true) {
      Task t;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](std::deque<Task>* q) { return !q->empty(); }, &queue_));
        t = queue_.front();
        queue_.pop_front();
      }
      (*t.fn)(t.begin, t.end);
      absl::MutexLock lock(&mu_);
      --*t.pending;
    }
  }

  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

Pool& SharedPool() {
  // Never destroyed: its threads wait for work until the process exits.
  static Pool* pool = new Pool(std::max(1u, std::min(16u, std::thread::hardware_concurrency())) - 1);
  return *pool;
}

}  // namespace

int ParallelParts(int64_t n, int64_t grain) {
  if (n < 2 * std::max<int64_t>(grain, 1)) return 1;
  return static_cast<int>(std::min<int64_t>(SharedPool().threads() + 1, n / std::max<int64_t>(grain, 1)));
}

void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  const int parts = ParallelParts(n, grain);
  if (parts <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  SharedPool().Run(parts, n, fn);
}

}  // namespace omnilearn
