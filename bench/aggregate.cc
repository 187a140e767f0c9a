// aggregate: one sync round of N pushes (N = 1, 4, 16) of an M MB gradient, server-side
// work only: reading the chunks in place and assembling them as they come off the wire
// (gRPC byte buffers built beforehand, as the service receives them), the checks, the accumulation, the optimizer step
// and the new snapshot. Baseline: memcpy of the same bytes (one copy of every pushed byte), in the same run.
//   bazel run -c opt //bench:aggregate -- [--megabytes=64] [--pushes=1,4,16] [--rounds=9]
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/grpc_chunks.h"
#include "common/tensor_codec.h"

ABSL_FLAG(double, megabytes, 64, "gradient size in MB");
ABSL_FLAG(std::string, pushes, "1,4,16", "pushes per round");
ABSL_FLAG(int, rounds, 9, "rounds per measurement (the median is reported)");

namespace omnilearn {
namespace bench {
namespace {

// A push's chunk messages as the service receives them (gRPC byte buffers).
std::vector<grpc::ByteBuffer> Chunks(const ModelLayout& layout, std::shared_ptr<const std::vector<float>> values) {
  std::vector<grpc::ByteBuffer> out;
  ForEachChunkBuffer(kPushRequestChunkField, layout, values->data(), values, [&](const grpc::ByteBuffer& b) {
    out.push_back(b);
    return true;
  });
  return out;
}

double MemcpySeconds(int64_t bytes, int copies, int reps) {
  std::vector<char> src(bytes, 1), dst(bytes);
  return MedianSeconds(reps, [&] {
    for (int c = 0; c < copies; ++c) {
      std::memcpy(dst.data(), src.data(), bytes);
      src[c % bytes] = dst[(c * 7) % bytes];  // keep the copies from being elided
    }
  });
}

// A sync core with `n` workers joined (w0 brings the model); their ids in `ids`.
std::unique_ptr<server::ParameterServerCore> JoinedCore(const ModelLayout& layout, int n, std::vector<WorkerId>* ids) {
  server::ServerOptions o;
  o.mode = server::Mode::kSync;
  o.num_workers = n;
  o.controller.global_batch = 64 * n;
  o.controller.policy = controller::Policy::kOff;
  o.round_timeout = absl::Seconds(50);
  o.optimizer.momentum = 0.9;  // SGD with a momentum buffer, as docs/performance.md's figures
  o.optimizer.weight_decay = 1e-4;
  auto core = *server::ParameterServerCore::Create(o);
  ids->assign(n, 0);
  std::vector<std::thread> joins;
  for (int i = 0; i < n; ++i) {
    joins.emplace_back([&, i] {
      server::JoinInfo info;
      info.name = "w" + std::to_string(i);
      info.layout = layout;
      if (i == 0) info.initial_parameters = std::vector<float>(layout.total_elements(), 0.5f);
      while (true) {
        auto r = core->Join(info, absl::Now() + absl::Seconds(60));
        if (r.ok()) {
          (*ids)[i] = r->id;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // w0 brings the model first
      }
    });
  }
  for (auto& t : joins) t.join();
  return core;
}

nlohmann::json Measure(double megabytes, int n, int rounds) {
  const ModelLayout layout = LayoutOfMegabytes(megabytes);
  const int64_t bytes = layout.total_elements() * sizeof(float);
  std::vector<WorkerId> ids;
  auto core = JoinedCore(layout, n, &ids);
  const std::vector<grpc::ByteBuffer> chunks =
      Chunks(layout, std::make_shared<const std::vector<float>>(layout.total_elements(), 1e-3f));
  const int64_t batch = 64;
  std::vector<double> times;
  for (int round = 0; round < rounds; ++round) {
    const uint64_t version = core->version();
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pushers;
    std::chrono::steady_clock::time_point start;
    for (int i = 0; i < n; ++i) {
      pushers.emplace_back([&, i] {
        ++ready;
        while (!go.load()) std::this_thread::yield();
        ChunkAssembler assembler(&layout, core->buffers().Take());  // as the service does
        ReceivedMessage<v1::PushRequest> msg;
        for (const grpc::ByteBuffer& c : chunks) {
          if (!msg.Parse(c, kPushRequestChunkField).ok() || !msg.is_chunk() || !assembler.Add(msg.chunk()).ok()) {
            throw std::runtime_error("bad chunk");
          }
        }
        std::vector<float> g = std::move(*assembler.Finish());
        server::PushInfo p;
        p.id = ids[i];
        p.batch = batch;
        p.compute_seconds = 0.01;
        p.version = version;
        p.finite_checked = assembler.all_finite();
        if (!core->Push(p, std::move(g), absl::Now() + absl::Seconds(60)).ok()) throw std::runtime_error("push");
      });
    }
    while (ready.load() < n) std::this_thread::yield();
    start = std::chrono::steady_clock::now();
    go.store(true);
    for (auto& t : pushers) t.join();
    times.push_back(Seconds(start));
  }
  const double server_s = Median(times);
  const double memcpy_s = MemcpySeconds(bytes, n, rounds);
  const double gb = static_cast<double>(bytes) * n / 1e9;
  std::printf("%3d pushes x %4.0f MB | server %6.2f GB/s (%7.1f ms) | memcpy %6.2f GB/s | ratio %.2f\n", n, megabytes,
              gb / server_s, 1000 * server_s, gb / memcpy_s, memcpy_s / server_s);
  std::fflush(stdout);
  return {{"pushes", n},
          {"megabytes", megabytes},
          {"server_seconds", server_s},
          {"memcpy_seconds", memcpy_s},
          {"server_gbps", gb / server_s},
          {"memcpy_gbps", gb / memcpy_s},
          {"ratio", memcpy_s / server_s}};
}

}  // namespace
}  // namespace bench
}  // namespace omnilearn

int main(int argc, char** argv) {
  using namespace omnilearn::bench;
  return BenchMain(argc, argv, "aggregate", []() -> absl::StatusOr<nlohmann::json> {
    std::printf(
        "aggregate: one sync round of N pushes, server-side work only (chunk assembly, checks, accumulation,\n"
        "optimizer step, snapshot); the baseline is memcpy of the same bytes.\n");
    return RowsFor("pushes", absl::GetFlag(FLAGS_pushes), 1, [](double n) -> absl::StatusOr<nlohmann::json> {
      return Measure(absl::GetFlag(FLAGS_megabytes), static_cast<int>(n), absl::GetFlag(FLAGS_rounds));
    });
  });
}
