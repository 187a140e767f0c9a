// Calls of the ParameterServer service whose messages travel as raw gRPC buffers: the
// model's chunks are written from and read into the workers' and server's own memory
// (common/grpc_chunks.h), never copied into protobuf messages.
//
// gRPC's synchronous API offers typed calls only; untyped ones are built from the same
// pieces its code generator uses for the "raw" method variants, which live in
// grpc::internal. This file is the project's only use of them, so an upgrade of gRPC
// that moves them touches nothing else.
#ifndef OMNILEARN_COMMON_GRPC_RAW_H_
#define OMNILEARN_COMMON_GRPC_RAW_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/method_handler.h>

#include <memory>
#include <string>

namespace omnilearn {
namespace raw {

using Buffer = grpc::ByteBuffer;
using ClientStream = grpc::ClientReaderWriter<Buffer, Buffer>;  // both ways
using ServerStream = grpc::ServerReaderWriter<Buffer, Buffer>;

// A method of a service by its full path ("/package.Service/Method") and its kind.
class Method {
 public:
  enum class Kind { kClientStreaming, kServerStreaming, kBidiStreaming };
  Method(std::string path, Kind kind, const std::shared_ptr<grpc::Channel>& channel)
      : path_(std::move(path)), method_(path_.c_str(), Type(kind), channel) {}
  Method(const Method&) = delete;
  Method& operator=(const Method&) = delete;

  // A client-streamed call: buffers out, one typed `Response` back (Finish fills it).
  template <typename Response>
  std::unique_ptr<grpc::ClientWriter<Buffer>> OpenUpload(grpc::Channel* channel, grpc::ClientContext* ctx,
                                                         Response* response) const {
    return std::unique_ptr<grpc::ClientWriter<Buffer>>(
        grpc::internal::ClientWriterFactory<Buffer>::Create(channel, method_, ctx, response));
  }
  // A server-streamed call: one buffer out, buffers back.
  std::unique_ptr<grpc::ClientReader<Buffer>> OpenDownload(grpc::Channel* channel, grpc::ClientContext* ctx,
                                                           const Buffer& request) const {
    return std::unique_ptr<grpc::ClientReader<Buffer>>(
        grpc::internal::ClientReaderFactory<Buffer>::Create(channel, method_, ctx, request));
  }
  // A bidirectional call.
  std::unique_ptr<ClientStream> OpenBidi(grpc::Channel* channel, grpc::ClientContext* ctx) const {
    return std::unique_ptr<ClientStream>(
        grpc::internal::ClientReaderWriterFactory<Buffer, Buffer>::Create(channel, method_, ctx));
  }

 private:
  static grpc::internal::RpcMethod::RpcType Type(Kind kind) {
    switch (kind) {
      case Kind::kClientStreaming:
        return grpc::internal::RpcMethod::CLIENT_STREAMING;
      case Kind::kServerStreaming:
        return grpc::internal::RpcMethod::SERVER_STREAMING;
      case Kind::kBidiStreaming:
        break;
    }
    return grpc::internal::RpcMethod::BIDI_STREAMING;
  }
  const std::string path_;  // RpcMethod keeps a pointer into it
  const grpc::internal::RpcMethod method_;
};

// Server side: handlers for grpc::Service::MarkMethodStreamed, calling `fn(service, ctx,
// ...)` on the service's own object.
using Handler = grpc::internal::MethodHandler;

// Buffers in and out (also serves a server-streaming method, whose one request the
// handler reads itself: the wire is the same).
template <typename Service, typename Fn>
Handler* BidiHandler(Service* service, Fn fn) {
  return new grpc::internal::BidiStreamingHandler<Service, Buffer, Buffer>(fn, service);
}

// Buffers in, one typed `Response` out.
template <typename Response, typename Service, typename Fn>
Handler* UploadHandler(Service* service, Fn fn) {
  return new grpc::internal::ClientStreamingHandler<Service, Buffer, Response>(fn, service);
}

}  // namespace raw
}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_GRPC_RAW_H_
