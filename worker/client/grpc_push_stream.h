// A push whose gradient leaves while backward runs (PsClient::StartPushPull over gRPC):
// a thread of its own writes the chunks while the caller (autograd's thread) only queues
// tensors, so a slow link never holds up backward; the reply and the model come back on
// the same stream. It reads and writes whatever stream it is given: the network's, or a
// test's fake.
#ifndef OMNILEARN_WORKER_CLIENT_GRPC_PUSH_STREAM_H_
#define OMNILEARN_WORKER_CLIENT_GRPC_PUSH_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/model_layout.h"
#include "proto/omnilearn.pb.h"
#include "worker/client/model_receiver.h"
#include "worker/client/ps_client.h"

namespace omnilearn {
namespace worker {

// A session's bfloat16 error feedback: what rounding lost of one push's gradient is added
// to the next one's, so the server's sum over steps loses nothing. Thread-safe.
class Bfloat16Feedback {
 public:
  // A new session: nothing carried over.
  void Reset() {
    absl::MutexLock lock(&mu_);
    residual_.clear();
  }
  // Encodes gradient[at, at + n) (of a gradient of `total` values) into out[at, at + n).
  void Encode(const float* gradient, int64_t at, int64_t n, int64_t total, uint16_t* out);

 private:
  absl::Mutex mu_;
  std::vector<float> residual_ ABSL_GUARDED_BY(mu_);
};

class GrpcPushStream : public PushStream {
 public:
  using Open = std::function<std::unique_ptr<RawStream>(grpc::ClientContext*)>;

  // `header` as sent (signed, its wire dtype and `trailer` set). `prepare` sets the call's
  // deadline and credentials on its context, `open` opens the PushPull on it. The gradient
  // is sent from where it lies (float32) or encoded tensor by tensor into this stream's
  // own buffer (bfloat16, through `feedback`, which must outlive the stream).
  GrpcPushStream(v1::PushHeader header, const ModelLayout& layout, absl::Span<const float> gradient,
                 Bfloat16Feedback* feedback, const std::function<void(grpc::ClientContext*)>& prepare,
                 const Open& open);
  // Before FinishEarly: the call is cancelled (the server drops a push it did not read
  // whole). After it: a model still arriving is given up.
  ~GrpcPushStream() override;

  void Send(const std::vector<int>& tensors) override;
  void CloseWrites(const StepEnd& end) override;
  absl::StatusOr<PushReply> FinishEarly(const StepEnd& end, uint64_t* model_version,
                                        absl::Span<float> weights) override;
  bool AwaitTensor(int t) override;
  absl::Status AwaitModel() override;

 private:
  void StopWriter(bool cancel);
  void ReadRest();
  void WriteLoop();
  bool WriteTensor(int t);

  const v1::PushHeader header_;
  const ModelLayout layout_;
  const absl::Span<const float> gradient_;
  Bfloat16Feedback* const feedback_;
  grpc::ClientContext ctx_;
  std::unique_ptr<RawStream> stream_;
  std::vector<uint16_t> encoded_;  // bfloat16: the gradient as sent, kept until the call ends
  absl::Mutex mu_;
  std::vector<int> queue_ ABSL_GUARDED_BY(mu_);
  v1::PushTrailer trailer_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_closed_ = false;  // CloseWrites ran: the writer is done
  bool finished_ = false;
  std::thread writer_;
  std::optional<ModelReceiver> receiver_ ABSL_GUARDED_BY(mu_);  // the model, after FinishEarly
  bool done_ ABSL_GUARDED_BY(mu_) = false;                      // its stream has ended
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  std::thread reader_;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_GRPC_PUSH_STREAM_H_
