// A streamed push alone, over a fake stream: no server, no network. What the writer
// thread puts on the wire, in what order, and how the reply and the model come back.
#include "worker/client/grpc_push_stream.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "catch2/catch.hpp"
#include "common/grpc_chunks.h"
#include "common/tensor_codec.h"
#include "worker/client/ps_proto.h"

namespace omnilearn {
namespace worker {
namespace {

// Three tensors: a[4], b[2,3], c[5].
ModelLayout Layout() { return *ModelLayout::Create({{"a", {4}}, {"b", {2, 3}}, {"c", {5}}}); }

// A PushPull stream that records what is written (parsed) and answers from a script. The
// script's messages are read only as far as the test has released them.
class FakeStream : public RawStream {
 public:
  struct Written {
    std::string kind;  // "header", "chunk", "trailer"
    v1::PushRequest message;
    std::string tensor;
    std::vector<float> values;  // a chunk's, decoded
  };

  // Scripted answers, and how many of them Read may deliver (all by default).
  std::vector<grpc::ByteBuffer> responses;
  grpc::Status finish_status;
  void Release(size_t n) {
    absl::MutexLock lock(&mu_);
    released_ = n;
  }
  bool bfloat16 = false;  // how to decode the chunks written

  void WaitForInitialMetadata() override {}
  bool NextMessageSize(uint32_t* size) override {
    *size = 1 << 20;
    return true;
  }
  bool Read(grpc::ByteBuffer* out) override {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return read_ >= responses.size() || read_ < std::min(released_, responses.size());
    };
    mu_.Await(absl::Condition(&ready));
    if (read_ >= responses.size()) return false;
    *out = responses[read_++];
    return true;
  }
  size_t read() {
    absl::MutexLock lock(&mu_);
    return read_;
  }
  bool Write(const grpc::ByteBuffer& b, grpc::WriteOptions) override {
    ReceivedMessage<v1::PushRequest> msg;
    REQUIRE(msg.Parse(b, kPushRequestChunkField).ok());
    Written w;
    if (msg.is_chunk()) {
      w.kind = "chunk";
      w.tensor = msg.chunk().name;
      std::string bytes;
      for (absl::string_view p : msg.chunk().data) bytes.append(p.data(), p.size());
      w.values.resize(bytes.size() / (bfloat16 ? 2 : 4));
      if (bfloat16) {
        CopyFiniteBfloat16(w.values.data(), bytes.data(), static_cast<int64_t>(w.values.size()));
      } else {
        std::memcpy(w.values.data(), bytes.data(), bytes.size());
      }
    } else {
      w.kind = msg.message().has_header() ? "header" : "trailer";
      w.message = msg.message();
    }
    absl::MutexLock lock(&mu_);
    written_.push_back(std::move(w));
    return true;
  }
  bool WritesDone() override {
    absl::MutexLock lock(&mu_);
    writes_done_ = true;
    return true;
  }
  grpc::Status Finish() override {
    absl::MutexLock lock(&mu_);
    ++finished_;
    return finish_status;
  }

  std::vector<Written> written() {
    absl::MutexLock lock(&mu_);
    return written_;
  }
  bool writes_done() {
    absl::MutexLock lock(&mu_);
    return writes_done_;
  }
  int finished() {
    absl::MutexLock lock(&mu_);
    return finished_;
  }

 private:
  absl::Mutex mu_;
  size_t released_ = ~size_t{0};
  size_t read_ = 0;
  std::vector<Written> written_;
  bool writes_done_ = false;
  int finished_ = 0;
};

// The stream a push owns: the test's fake, borrowed, so that the test reads it after the
// push is gone.
class Borrowed : public RawStream {
 public:
  explicit Borrowed(FakeStream* fake) : fake_(fake) {}
  void WaitForInitialMetadata() override {}
  bool NextMessageSize(uint32_t* size) override { return fake_->NextMessageSize(size); }
  bool Read(grpc::ByteBuffer* out) override { return fake_->Read(out); }
  bool Write(const grpc::ByteBuffer& b, grpc::WriteOptions o) override { return fake_->Write(b, o); }
  bool WritesDone() override { return fake_->WritesDone(); }
  grpc::Status Finish() override { return fake_->Finish(); }

 private:
  FakeStream* const fake_;
};

// The answer of a server that applied the push: the reply, the model's header, its chunks.
std::vector<grpc::ByteBuffer> Answer(const ModelLayout& layout, const std::vector<float>& model, uint64_t version) {
  std::vector<grpc::ByteBuffer> out;
  v1::PushPullResponse reply;
  reply.mutable_reply()->set_model_version(version);
  reply.mutable_reply()->set_next_batch_size(5);
  reply.mutable_reply()->set_applied(true);
  out.push_back(Serialize(reply));
  v1::PushPullResponse header;
  header.mutable_header()->set_model_version(version);
  out.push_back(Serialize(header));
  ForEachChunkBuffer(kPushPullResponseChunkField, layout, model.data(), nullptr, [&](const grpc::ByteBuffer& b) {
    out.push_back(b);
    return true;
  });
  return out;
}

v1::PushHeader Header(v1::WireDtype dtype) {
  v1::PushHeader h;
  h.set_worker_id(3);
  h.set_batch_size(8);
  h.set_trailer(true);
  h.set_wire_dtype(dtype);
  return h;
}

// A push stream over `fake`.
std::unique_ptr<GrpcPushStream> Open(FakeStream* fake, const ModelLayout& layout, const std::vector<float>& gradient,
                                     Bfloat16Feedback* feedback, v1::WireDtype dtype = v1::WIRE_DTYPE_F32) {
  return std::make_unique<GrpcPushStream>(
      Header(dtype), layout, gradient, feedback, [](grpc::ClientContext*) {},
      [fake](grpc::ClientContext*) { return std::unique_ptr<RawStream>(new Borrowed(fake)); });
}

std::vector<float> Iota(int n, float from) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + static_cast<float>(i);
  return v;
}

// A push over a fake stream that answers with `model` at `version`: the tests' set-up.
struct ScriptedPush {
  ScriptedPush(std::vector<float> values, uint64_t version) : model(std::move(values)) {
    fake.responses = Answer(layout, model, version);
    push = Open(&fake, layout, gradient, &feedback);
  }
  const ModelLayout layout = Layout();
  const std::vector<float> gradient = Iota(15, 1.0f);
  const std::vector<float> model;
  FakeStream fake;
  Bfloat16Feedback feedback;
  std::unique_ptr<GrpcPushStream> push;  // last: gone before the stream it borrows
};

TEST_CASE("tensors leave as backward finishes them, each once; the rest and the trailer at the close",
          "[grpc_push_stream]") {
  ScriptedPush s(Iota(15, 100.0f), 7);
  s.push->Send({2});
  s.push->Send({0, 2});  // c again: sent once
  std::vector<float> weights(15, 0.0f);
  uint64_t version = 0;
  absl::StatusOr<PushReply> reply =
      s.push->FinishEarly(StepEnd{0.25, 1.5, std::nullopt}, &version, absl::MakeSpan(weights));
  REQUIRE(reply.ok());
  REQUIRE(reply->model_version == 7);
  REQUIRE(reply->next_batch_size == 5);
  REQUIRE(version == 7);

  const std::vector<FakeStream::Written> w = s.fake.written();
  REQUIRE(w.size() == 5);
  REQUIRE(w[0].kind == "header");
  REQUIRE(w[0].message.header().worker_id() == 3);
  REQUIRE(w[0].message.header().trailer());
  std::vector<std::string> order;
  for (size_t i = 1; i < 4; ++i) {
    REQUIRE(w[i].kind == "chunk");
    order.push_back(w[i].tensor);
    const int t = s.layout.Find(w[i].tensor);
    const std::vector<float> want(s.gradient.begin() + s.layout.offset(t),
                                  s.gradient.begin() + s.layout.offset(t) + s.layout.size(t));
    REQUIRE(w[i].values == want);
  }
  REQUIRE(order == std::vector<std::string>{"c", "a", "b"});  // b got no notice: sent at the close
  REQUIRE(w[4].kind == "trailer");
  REQUIRE(w[4].message.trailer().compute_seconds() == 0.25);
  REQUIRE(w[4].message.trailer().train_loss() == 1.5);
  REQUIRE(s.fake.writes_done());

  REQUIRE(s.push->AwaitModel().ok());
  for (int t = 0; t < 3; ++t) REQUIRE(s.push->AwaitTensor(t));
  REQUIRE(weights == s.model);
}

TEST_CASE("the reply comes back before the model's chunks; each tensor is usable once its own are in",
          "[grpc_push_stream]") {
  ScriptedPush s(Iota(15, -50.0f), 9);  // reply, header, a, b, c
  s.fake.Release(3);                    // the reply, the header and a's chunk
  std::vector<float> weights(15, 0.0f);
  uint64_t version = 0;
  REQUIRE(s.push->FinishEarly(StepEnd{0.1, 2.0, 0.5}, &version, absl::MakeSpan(weights)).ok());
  REQUIRE(version == 9);
  REQUIRE(s.push->AwaitTensor(0));  // a's values are in, b's and c's not yet released
  REQUIRE(std::vector<float>(weights.begin(), weights.begin() + 4) ==
          std::vector<float>(s.model.begin(), s.model.begin() + 4));
  REQUIRE(s.fake.read() == 3);
  REQUIRE(weights[4] == 0.0f);
  s.fake.Release(~size_t{0});
  REQUIRE(s.push->AwaitTensor(2));
  REQUIRE(s.push->AwaitModel().ok());
  REQUIRE(weights == s.model);
  REQUIRE(s.fake.written().back().message.trailer().test_accuracy() == 0.5);
}

TEST_CASE("CloseWrites writes everything and the trailer before any reply is read; FinishEarly then reads",
          "[grpc_push_stream]") {
  ScriptedPush s(Iota(15, 10.0f), 4);
  s.push->Send({1});
  s.push->CloseWrites(StepEnd{0.5, 3.0, std::nullopt});
  const std::vector<FakeStream::Written> w = s.fake.written();  // all of it, on return
  REQUIRE(w.size() == 5);
  REQUIRE(w[1].tensor == "b");
  REQUIRE(w[4].kind == "trailer");
  REQUIRE(w[4].message.trailer().compute_seconds() == 0.5);
  REQUIRE(s.fake.writes_done());
  REQUIRE(s.fake.read() == 0);
  s.push->CloseWrites(StepEnd{9, 9, std::nullopt});  // once only
  std::vector<float> weights(15, 0.0f);
  uint64_t version = 0;
  REQUIRE(s.push->Finish(StepEnd{9, 9, std::nullopt}, &version, absl::MakeSpan(weights)).ok());
  REQUIRE(s.fake.written().size() == 5);  // FinishEarly wrote nothing more
  REQUIRE(version == 4);
  REQUIRE(weights == s.model);
}

TEST_CASE("a push closed but never finished is cancelled without a second join of its writer", "[grpc_push_stream]") {
  ScriptedPush s(Iota(15, 0.0f), 1);
  s.push->CloseWrites(StepEnd{});
  s.push.reset();
  REQUIRE(s.fake.finished() == 1);
}

TEST_CASE("in bfloat16 each tensor is encoded with the session's error feedback, push after push",
          "[grpc_push_stream]") {
  const ModelLayout layout = Layout();
  std::vector<float> gradient(15);
  for (int i = 0; i < 15; ++i) gradient[i] = 1.0f + 0.001f * static_cast<float>(i + 1);  // not bfloat16 values
  // What two pushes must send: the gradient encoded with the residual carried over.
  std::vector<float> residual(15, 0.0f);
  std::vector<uint16_t> encoded(15);
  std::vector<std::vector<float>> want(2, std::vector<float>(15));
  for (int p = 0; p < 2; ++p) {
    EncodeBfloat16(gradient.data(), 15, encoded.data(), residual.data());
    CopyFiniteBfloat16(want[p].data(), encoded.data(), 15);
  }
  REQUIRE(want[0] != want[1]);  // the second push carries the first's rounding error

  Bfloat16Feedback feedback;
  for (int p = 0; p < 2; ++p) {
    FakeStream owned;
    FakeStream* fake = &owned;
    fake->bfloat16 = true;
    fake->responses = Answer(layout, std::vector<float>(15, 0.0f), p + 1);
    std::unique_ptr<GrpcPushStream> push = Open(fake, layout, gradient, &feedback, v1::WIRE_DTYPE_BF16);
    push->Send({1, 0});
    std::vector<float> weights(15);
    uint64_t version = 0;
    REQUIRE(push->FinishEarly(StepEnd{}, &version, absl::MakeSpan(weights)).ok());
    REQUIRE(push->AwaitModel().ok());
    std::vector<float> sent(15);
    for (const FakeStream::Written& w : fake->written()) {
      if (w.kind != "chunk") continue;
      const int t = layout.Find(w.tensor);
      std::copy(w.values.begin(), w.values.end(), sent.begin() + layout.offset(t));
    }
    REQUIRE(sent == want[p]);
  }
}

TEST_CASE("a call that fails before its reply is the call's error; a push given up sends no trailer",
          "[grpc_push_stream]") {
  const ModelLayout layout = Layout();
  const std::vector<float> gradient = Iota(15, 1.0f);
  Bfloat16Feedback feedback;
  FakeStream owned_failing;
  FakeStream* failing = &owned_failing;
  failing->finish_status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "link down");
  std::unique_ptr<GrpcPushStream> push = Open(failing, layout, gradient, &feedback);
  std::vector<float> weights(15);
  uint64_t version = 0;
  absl::StatusOr<PushReply> reply = push->FinishEarly(StepEnd{}, &version, absl::MakeSpan(weights));
  REQUIRE(absl::IsUnavailable(reply.status()));
  REQUIRE(reply.status().message() == "PushPull: link down");
  REQUIRE(absl::IsUnavailable(push->AwaitModel()));

  FakeStream abandoned;
  push = Open(&abandoned, layout, gradient, &feedback);
  push->Send({0});
  push.reset();  // e.g. out of memory mid-step: the push is cancelled
  REQUIRE(abandoned.finished() == 1);
  REQUIRE_FALSE(abandoned.writes_done());
  for (const FakeStream::Written& w : abandoned.written()) REQUIRE(w.kind != "trailer");
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
