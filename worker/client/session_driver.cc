// A scripted C++ worker on the worker core (Session over the gRPC client), the loop the
// trainer runs without the model: join, pull, then per iteration a PushPull (or an
// out-of-memory report), pulling and training the iteration again after a rejoin,
// ending at a stop; then leave. It prints one line per outcome ("replied", "rejoined",
// "stop", "error CODE"), which python/tests/test_conformance.py compares with a Python
// Worker's against the same scripted fake server.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/model_layout.h"
#include "worker/client/ps_client.h"
#include "worker/client/session.h"

ABSL_FLAG(std::string, server, "", "host:port of the (fake) server");
ABSL_FLAG(std::string, name, "cpp0", "worker name");
ABSL_FLAG(std::string, layout, "", "the model's tensors: NAME:D1xD2,... (parameters, layout order)");
ABSL_FLAG(int, iterations, 3, "iterations to train");
ABSL_FLAG(int, oom_at, -1, "the iteration that reports out of memory instead of a gradient");
ABSL_FLAG(int64_t, dataset_size, 0, "the training set's size");
ABSL_FLAG(std::string, auth_token, "", "bearer token");
ABSL_FLAG(double, reconnect_timeout, 30, "seconds");

namespace omnilearn {
namespace {

absl::StatusOr<ModelLayout> ParseLayout(const std::string& text) {
  std::vector<TensorSpec> specs;
  for (absl::string_view t : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(t, ':');
    if (parts.size() != 2) return absl::InvalidArgumentError("--layout is NAME:D1xD2,...");
    TensorSpec spec{parts[0], {}, false};
    for (absl::string_view d : absl::StrSplit(parts[1], 'x')) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(d, &n)) return absl::InvalidArgumentError("--layout is NAME:D1xD2,...");
      spec.shape.push_back(n);
    }
    specs.push_back(std::move(spec));
  }
  return ModelLayout::Create(std::move(specs));
}

void Outcome(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

int Error(const absl::Status& s) {
  Outcome("error " + absl::StatusCodeToString(s.code()));
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return 1;
}

int Run() {
  absl::StatusOr<ModelLayout> layout = ParseLayout(absl::GetFlag(FLAGS_layout));
  if (!layout.ok()) return Error(layout.status());
  worker::ClientOptions co;
  co.rpc_timeout = absl::Seconds(30);
  co.auth_token = absl::GetFlag(FLAGS_auth_token);
  auto client = worker::MakeGrpcPsClient(absl::GetFlag(FLAGS_server), co);
  if (!client.ok()) return Error(client.status());
  worker::SessionOptions so;
  so.worker.name = absl::GetFlag(FLAGS_name);
  so.worker.dataset_size = absl::GetFlag(FLAGS_dataset_size);
  so.reconnect_timeout = absl::Seconds(absl::GetFlag(FLAGS_reconnect_timeout));
  so.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  worker::Session session(client->get(), *layout, so);
  std::vector<float> weights(layout->total_elements(), 0.5f), gradient(layout->total_elements(), 0.25f);
  if (absl::Status s = session.Join(weights); !s.ok()) return Error(s);
  if (session.stop_requested()) {
    Outcome("stop");
    return 0;
  }
  if (absl::StatusOr<bool> p = session.Pull(absl::MakeSpan(weights)); !p.ok()) return Error(p.status());
  int iteration = 0;
  while (iteration < absl::GetFlag(FLAGS_iterations)) {
    worker::StepReport step;
    step.batch_size = session.batch();
    step.end.compute_seconds = 0.25;
    step.out_of_memory = iteration == absl::GetFlag(FLAGS_oom_at);
    worker::PushReply reply;
    bool changed = false;
    absl::StatusOr<worker::PushOutcome> o = session.PushPull(step, gradient, absl::MakeSpan(weights), &reply, &changed);
    if (!o.ok()) return Error(o.status());
    if (*o == worker::PushOutcome::kStop) {
      Outcome("stop");
      break;
    }
    if (*o == worker::PushOutcome::kRejoined) {
      Outcome("rejoined");
      if (absl::StatusOr<bool> p = session.Pull(absl::MakeSpan(weights)); !p.ok()) return Error(p.status());
      continue;
    }
    Outcome("replied");
    ++iteration;
  }
  session.Leave(iteration == absl::GetFlag(FLAGS_iterations));
  return 0;
}

}  // namespace
}  // namespace omnilearn

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return omnilearn::Run();
}
