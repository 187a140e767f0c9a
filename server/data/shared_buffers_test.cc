#include "server/data/shared_buffers.h"

#include <memory>
#include <vector>

#include "catch2/catch.hpp"

namespace omnilearn {
namespace server {
namespace {

TEST_CASE("a retired buffer no reader holds is the next one taken", "[shared_buffers]") {
  SharedBuffers buffers;
  SharedBuffers::Buffer first = buffers.Take(8);
  REQUIRE(buffers.allocated() == 1);
  REQUIRE(first->size() == 8);
  const float* memory = first->data();
  buffers.Retire(std::move(first));
  SharedBuffers::Buffer again = buffers.Take(8);
  REQUIRE(again->data() == memory);
  REQUIRE(buffers.allocated() == 1);
  REQUIRE(buffers.retired() == 0);
}

TEST_CASE("a held buffer is kept until let go, then reused; the newest free one is taken", "[shared_buffers]") {
  SharedBuffers buffers;
  SharedBuffers::Buffer a = buffers.Take(4);
  SharedBuffers::Buffer reader = a;  // a checkpoint keeps it
  buffers.Retire(std::move(a));
  SharedBuffers::Buffer b = buffers.Take(4);  // `a` is held: a new one
  REQUIRE(buffers.allocated() == 2);
  REQUIRE(b != reader);
  REQUIRE(buffers.retired() == 1);
  const float* b_memory = b->data();
  buffers.Retire(std::move(b));
  reader.reset();  // both retired ones are free now
  SharedBuffers::Buffer c = buffers.Take(4);
  REQUIRE(c->data() == b_memory);   // the newest
  REQUIRE(buffers.retired() == 0);  // the other free one is not kept
  REQUIRE(buffers.allocated() == 2);
}

TEST_CASE("a free buffer of another size is not taken, and null is not retired", "[shared_buffers]") {
  SharedBuffers buffers;
  buffers.Retire(nullptr);
  REQUIRE(buffers.retired() == 0);
  buffers.Retire(std::make_shared<std::vector<float>>(3));
  SharedBuffers::Buffer taken = buffers.Take(5);
  REQUIRE(taken->size() == 5);
  REQUIRE(buffers.allocated() == 1);
  REQUIRE(buffers.retired() == 0);
  buffers.Retire(taken);  // still held here
  buffers.Clear();
  REQUIRE(buffers.retired() == 0);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
