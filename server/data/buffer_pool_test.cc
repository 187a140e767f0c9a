#include "server/data/buffer_pool.h"

#include <thread>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a returned buffer's memory is what the next take gets", "[buffer_pool]") {
  BufferPool pool;
  REQUIRE(pool.Take().capacity() == 0);  // empty pool: an empty buffer
  std::vector<float> b(1000, 1.0f);
  const float* memory = b.data();
  pool.Return(std::move(b));
  REQUIRE(pool.pooled() == 1);
  std::vector<float> again = pool.Take();
  REQUIRE(again.data() == memory);
  REQUIRE(again.size() == 1000);
  REQUIRE(pool.pooled() == 0);
}

TEST_CASE("buffers without memory are not kept, and the pool keeps at most its bound", "[buffer_pool]") {
  BufferPool pool(/*max_buffers=*/2);
  pool.Return({});
  REQUIRE(pool.pooled() == 0);
  for (int i = 0; i < 3; ++i) pool.Return(std::vector<float>(10));
  REQUIRE(pool.pooled() == 2);
}

TEST_CASE("takes and returns from many threads lose no buffer and share none", "[buffer_pool]") {
  BufferPool pool(/*max_buffers=*/64);
  for (int i = 0; i < 8; ++i) pool.Return(std::vector<float>(16, 0.0f));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 1000; ++i) {
        std::vector<float> b = pool.Take();
        if (b.empty()) b.resize(16);
        for (float& x : b) x = static_cast<float>(t);  // a shared buffer would be seen by TSan
        pool.Return(std::move(b));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  REQUIRE(pool.pooled() >= 8);
  REQUIRE(pool.pooled() <= 16);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
