#include "common/grpc_chunks.h"

#include <numeric>

#include "catch2/catch.hpp"
#include "proto/omnilearn.pb.h"

namespace omnilearn {
namespace {

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  REQUIRE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST_CASE("the chunk field numbers are the proto's", "[grpc_chunks]") {
  CHECK(v1::JoinRequest::descriptor()->FindFieldByName("chunk")->number() == kJoinRequestChunkField);
  CHECK(v1::PushRequest::descriptor()->FindFieldByName("chunk")->number() == kPushRequestChunkField);
  CHECK(v1::PullResponse::descriptor()->FindFieldByName("chunk")->number() == kPullResponseChunkField);
  CHECK(v1::PushPullResponse::descriptor()->FindFieldByName("chunk")->number() == kPushPullResponseChunkField);
}

TEST_CASE("chunk buffers are the proto's messages and keep their owner alive", "[grpc_chunks]") {
  auto layout = ModelLayout::Create({{"w", {3, 4}}, {"b", {4}}});
  REQUIRE(layout.ok());
  auto values = std::make_shared<std::vector<float>>(layout->total_elements());
  std::iota(values->begin(), values->end(), 1.0f);
  std::vector<grpc::ByteBuffer> buffers;
  REQUIRE(
      ForEachChunkBuffer(kPushPullResponseChunkField, *layout, values->data(), values, [&](const grpc::ByteBuffer& b) {
        buffers.push_back(b);
        return true;
      }));
  REQUIRE(buffers.size() == 2);
  CHECK(values.use_count() == 3);  // each payload slice holds the owner
  std::vector<float> back;
  for (const grpc::ByteBuffer& b : buffers) {
    v1::PushPullResponse m;
    REQUIRE(m.ParseFromString(Flatten(b)));
    REQUIRE(m.has_chunk());
    const std::string& d = m.chunk().data();
    const float* f = reinterpret_cast<const float*>(d.data());
    back.insert(back.end(), f, f + d.size() / sizeof(float));
  }
  CHECK(back == *values);
  buffers.clear();
  CHECK(values.use_count() == 1);  // gRPC's slices are gone: the snapshot may be reused
}

TEST_CASE("chunk buffers in an order of the caller's", "[grpc_chunks]") {
  auto layout = ModelLayout::Create({{"w", {40}}, {"b", {2}}, {"bn.running_mean", {1}, true}});
  REQUIRE(layout.ok());
  const std::vector<float> values(layout->total_elements(), 1.0f);
  std::vector<std::string> names;
  REQUIRE(ForEachChunkBufferInOrder(kPullResponseChunkField, *layout, layout->SendOrder(), values.data(), nullptr,
                                    [&](const grpc::ByteBuffer& b) {
                                      v1::PullResponse m;
                                      REQUIRE(m.ParseFromString(Flatten(b)));
                                      names.push_back(m.chunk().name());
                                      return true;
                                    }));
  CHECK(names == std::vector<std::string>{"bn.running_mean", "w", "b"});
  int calls = 0;  // the caller's false stops it
  CHECK_FALSE(ForEachChunkBufferInOrder(kPullResponseChunkField, *layout, {0, 1}, values.data(), nullptr,
                                        [&](const grpc::ByteBuffer&) { return ++calls > 5; }));
  CHECK(calls == 1);
}

TEST_CASE("a received message is a chunk read in place, or parsed by protobuf", "[grpc_chunks]") {
  auto layout = ModelLayout::Create({{"w", {5}}});
  REQUIRE(layout.ok());
  const std::vector<float> values = {1, 2, 3, 4, 5};
  const grpc::ByteBuffer chunk =
      ChunkBuffer(kPushRequestChunkField, layout->tensors()[0], 0, values.data(), 5, 4, nullptr);
  ReceivedMessage<v1::PushRequest> m;
  REQUIRE(m.Parse(chunk, kPushRequestChunkField).ok());
  REQUIRE(m.is_chunk());
  ChunkAssembler a(&*layout);
  REQUIRE(a.Add(m.chunk()).ok());
  CHECK(*a.Finish() == values);

  v1::PushRequest header;
  header.mutable_header()->set_worker_id(42);
  REQUIRE(m.Parse(Serialize(header), kPushRequestChunkField).ok());
  REQUIRE_FALSE(m.is_chunk());
  CHECK(m.message().header().worker_id() == 42);

  // A chunk protobuf encoded differently (unpacked shape) still arrives, through protobuf.
  std::string odd = "\x12\x0e\x0a\x01w\x10\x05\x22\x08";
  odd += std::string(8, '\0');
  odd[1] = static_cast<char>(odd.size() - 2);
  grpc::Slice s(odd);
  REQUIRE(m.Parse(grpc::ByteBuffer(&s, 1), kPushRequestChunkField).ok());
  REQUIRE(m.is_chunk());
  CHECK(m.chunk().shape == std::vector<int64_t>{5});
  CHECK(m.chunk().data_bytes == 8);

  grpc::Slice junk(std::string("\xff\xff\xff", 3));
  CHECK(m.Parse(grpc::ByteBuffer(&junk, 1), kPushRequestChunkField).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace omnilearn
