// worker_transfer: the C++ worker's side of bench/python_transfer.py. A worker on the
// worker core (Session over the gRPC client, as the C++ trainer uses it) joins a running
// server with a model of one Linear layer of S MB (weight [S*256, 1024], bias [S*256]:
// the Python side's torch.nn.Linear(1024, S*256)) and times, per repetition: a push
// (Session::Push), a pull of the model the push moved (Session::Pull), and a round
// (Session::PushPull: the push and the new model). Prints one JSON line of the seconds.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_util.h"
#include "common/large_buffers.h"
#include "common/model_layout.h"
#include "common/tensor_codec.h"
#include "worker/client/ps_client.h"
#include "worker/client/session.h"

ABSL_FLAG(std::string, server, "", "host:port");
ABSL_FLAG(int, megabytes, 16, "the model's size (S)");
ABSL_FLAG(int, reps, 5, "repetitions");

namespace omnilearn {
namespace {

std::string Json(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

int Run() {
  const int64_t rows = int64_t{absl::GetFlag(FLAGS_megabytes)} * 256;
  absl::StatusOr<ModelLayout> layout = ModelLayout::Create({{"weight", {rows, 1024}}, {"bias", {rows}}});
  if (!layout.ok()) return std::fprintf(stderr, "%s\n", layout.status().ToString().c_str()), 1;
  auto client = worker::MakeGrpcPsClient(absl::GetFlag(FLAGS_server), worker::ClientOptions());
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.status().ToString().c_str()), 1;
  worker::SessionOptions so;
  so.worker.name = "cpp";
  so.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  worker::Session session(client->get(), *layout, so);
  std::vector<float> weights(layout->total_elements(), 0.01f), gradient(layout->total_elements(), 1e-6f);
  absl::Status s = session.Join(weights);
  if (s.ok()) s = session.Pull(absl::MakeSpan(weights)).status();
  std::vector<double> push, pull, round;
  for (int r = 0; s.ok() && r < absl::GetFlag(FLAGS_reps); ++r) {
    worker::StepReport h;
    h.batch_size = session.batch();
    h.end.compute_seconds = 0.01;
    worker::PushReply reply;
    auto start = std::chrono::steady_clock::now();
    absl::StatusOr<worker::PushOutcome> o = session.Push(h, gradient, weights, &reply);
    push.push_back(bench::Seconds(start));
    if (!o.ok()) s = o.status();
    start = std::chrono::steady_clock::now();
    absl::StatusOr<bool> changed = session.Pull(absl::MakeSpan(weights));  // the push moved the model
    pull.push_back(bench::Seconds(start));
    if (s.ok() && !changed.ok()) s = changed.status();
    bool moved = false;
    start = std::chrono::steady_clock::now();
    o = session.PushPull(h, gradient, absl::MakeSpan(weights), &reply, &moved);
    round.push_back(bench::Seconds(start));
    if (s.ok() && !o.ok()) s = o.status();
  }
  session.Leave(true);
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  std::printf("{\"push_s\": %s, \"pull_s\": %s, \"round_s\": %s}\n", Json(push).c_str(), Json(pull).c_str(),
              Json(round).c_str());
  return 0;
}

}  // namespace
}  // namespace omnilearn

int main(int argc, char** argv) {
  omnilearn::KeepLargeBuffersInHeap();  // as the C++ worker does
  absl::ParseCommandLine(argc, argv);
  return omnilearn::Run();
}
