// omnilearn_server: the OmniLearn parameter-server daemon.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"
#include "common/metrics.h"
#include "common/metrics_exposer.h"
#include "common/tensor_codec.h"
#include "server/checkpoint.h"
#include "server/checkpointer.h"
#include "server/parameter_server_core.h"
#include "server/service.h"
#include "server/summary.h"

ABSL_FLAG(int, port, 50051, "gRPC port");
ABSL_FLAG(std::string, bind, "0.0.0.0", "address to listen on");
ABSL_FLAG(std::string, mode, "sync", "sync | async | ssp (stale-synchronous, see --staleness_bound)");
ABSL_FLAG(int, staleness_bound, 4, "ssp: iterations a worker may run ahead of the slowest (0 = lockstep)");
ABSL_FLAG(int, num_workers, 1, "workers the first round waits for");
ABSL_FLAG(int, start_timeout_s, 300, "start without the missing workers after this many seconds");
ABSL_FLAG(int64_t, global_batch, 256, "sum of all workers' mini-batches");
ABSL_FLAG(int64_t, min_batch, 1, "smallest per-worker batch");
ABSL_FLAG(int64_t, max_batch, 0, "largest per-worker batch (0 = global batch)");
ABSL_FLAG(double, lr, 0.05, "learning rate of one step on a global batch");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum");
ABSL_FLAG(double, weight_decay, 1e-4, "L2 weight decay");
ABSL_FLAG(uint64_t, lr_decay_steps, 0, "multiply lr by --lr_decay every this many versions (0 = constant)");
ABSL_FLAG(double, lr_decay, 0.1, "step decay factor");
ABSL_FLAG(std::string, controller, "omnilearn", "omnilearn | paper | off (equal static batches)");
ABSL_FLAG(int, adjust_every, 10, "iterations between controller adjustments");
ABSL_FLAG(double, deadband, 0.05, "omnilearn: minimum predicted spread excess before re-planning");
ABSL_FLAG(double, round_timeout, 30, "sync/ssp: seconds to wait for a late worker before dropping it");
ABSL_FLAG(double, lease, 60, "seconds without a call after which a worker is gone");
ABSL_FLAG(std::string, summary_json, "", "write a JSON summary here on exit");
ABSL_FLAG(bool, quiet, false, "no line per controller adjustment");
ABSL_FLAG(int, metrics_port, 9400, "Prometheus /metrics port (0 = off)");
ABSL_FLAG(std::string, metrics_bind, "0.0.0.0", "address the /metrics endpoint listens on");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate chain (with --tls_key: TLS on)");
ABSL_FLAG(std::string, tls_key, "", "PEM server private key");
ABSL_FLAG(std::string, tls_client_ca, "", "PEM CA for client certificates (mutual TLS: workers must present one)");
ABSL_FLAG(std::string, auth_token_file, "", "file holding a shared bearer token every call must carry");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "keep checkpoints here and resume from the newest valid one at start (empty = no checkpoints)");
ABSL_FLAG(double, checkpoint_every_s, 60, "seconds between checkpoints (one more is written at shutdown)");
ABSL_FLAG(int, checkpoint_keep, 3, "checkpoints kept (older ones are deleted)");
ABSL_FLAG(bool, fresh, false,
          "start a new model although --checkpoint_dir holds checkpoints (they are moved aside, not deleted)");
ABSL_FLAG(std::string, export, "",
          "at shutdown, write the trained weights alone to this safetensors file (for Python, --init_from)");

namespace omnilearn {
namespace server {
namespace {

// Prints what a checkpoint attempt did; false on an error (the server goes on: the
// previous checkpoints are intact).
bool ReportCheckpoint(const absl::StatusOr<std::string>& written) {
  if (!written.ok()) {
    std::fprintf(stderr, "omnilearn_server: checkpoint failed: %s\n", std::string(written.status().message()).c_str());
    return false;
  }
  if (!written->empty()) {
    std::printf("omnilearn_server: checkpoint %s\n", written->c_str());
    std::fflush(stdout);
  }
  return true;
}

// --checkpoint_dir: resumes from the newest valid checkpoint (or, with --fresh, moves
// the old ones aside) and sets up the timer. Errors stop the server: a checkpoint that
// does not fit the flags is never silently replaced by a fresh start.
absl::Status SetUpCheckpoints(ParameterServerCore* core, std::unique_ptr<Checkpointer>* checkpointer) {
  const std::string path = absl::GetFlag(FLAGS_checkpoint_dir);
  if (path.empty()) {
    if (absl::GetFlag(FLAGS_fresh)) return absl::InvalidArgumentError("--fresh needs --checkpoint_dir");
    return absl::OkStatus();
  }
  if (!(absl::GetFlag(FLAGS_checkpoint_every_s) > 0) || absl::GetFlag(FLAGS_checkpoint_keep) < 1) {
    return absl::InvalidArgumentError("--checkpoint_every_s must be > 0 and --checkpoint_keep >= 1");
  }
  CheckpointDir dir(path, absl::GetFlag(FLAGS_checkpoint_keep));
  if (absl::Status s = dir.Prepare(); !s.ok()) return s;
  if (absl::GetFlag(FLAGS_fresh)) {
    absl::StatusOr<std::string> aside = dir.MoveAside(absl::Now());
    if (!aside.ok()) return aside.status();
    if (!aside->empty()) std::printf("omnilearn_server: --fresh: moved the old checkpoints to %s\n", aside->c_str());
  } else {
    auto loaded = dir.LoadNewest([](const std::string& warning) {
      std::fprintf(stderr, "omnilearn_server: WARNING: %s\n", warning.c_str());
    });
    if (!loaded.ok()) return loaded.status();
    if (loaded->has_value()) {
      const auto& [file, state] = **loaded;
      if (absl::Status s = core->Restore(state); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("cannot resume from ", file, ": ", s.message()));
      }
      std::printf("omnilearn_server: resumed from %s: version %lu, %lu samples, %zu workers remembered, %.0f s old\n",
                  file.c_str(), state.version, state.global_samples, state.controller.size(),
                  absl::ToDoubleSeconds(absl::Now() - state.created));
    } else if (!dir.List().empty()) {
      return absl::DataLossError(absl::StrCat("no checkpoint in ", path,
                                              " could be read: fix or move them, or start over with --fresh"));
    }
  }
  *checkpointer = std::make_unique<Checkpointer>(core, std::move(dir),
                                                 absl::Seconds(absl::GetFlag(FLAGS_checkpoint_every_s)));
  return absl::OkStatus();
}

int Run() {
  // SIGTERM / SIGINT are taken by sigwait below, so shutdown runs outside signal
  // context. Blocked first, before any thread exists (civetweb's, gRPC's): threads
  // inherit the mask, and one that left them unblocked would let a SIGTERM kill the
  // process before the summary is written.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ServerOptions o;
  auto mode = ParseMode(absl::GetFlag(FLAGS_mode));
  auto policy = controller::ParsePolicy(absl::GetFlag(FLAGS_controller));
  if (!mode.ok() || !policy.ok()) {
    std::fprintf(stderr, "omnilearn_server: %s\n",
                 std::string((!mode.ok() ? mode.status() : policy.status()).message()).c_str());
    return 2;
  }
  o.mode = *mode;
  o.staleness_bound = absl::GetFlag(FLAGS_staleness_bound);
  o.num_workers = absl::GetFlag(FLAGS_num_workers);
  o.start_timeout = absl::Seconds(absl::GetFlag(FLAGS_start_timeout_s));
  o.round_timeout = absl::Seconds(absl::GetFlag(FLAGS_round_timeout));
  o.lease = absl::Seconds(absl::GetFlag(FLAGS_lease));
  o.adjust_every = absl::GetFlag(FLAGS_adjust_every);
  o.controller.policy = *policy;
  o.controller.global_batch = absl::GetFlag(FLAGS_global_batch);
  o.controller.min_batch = absl::GetFlag(FLAGS_min_batch);
  o.controller.max_batch = absl::GetFlag(FLAGS_max_batch);
  o.controller.deadband = absl::GetFlag(FLAGS_deadband);
  o.optimizer.learning_rate = absl::GetFlag(FLAGS_lr);
  o.optimizer.momentum = absl::GetFlag(FLAGS_momentum);
  o.optimizer.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.optimizer.lr_decay_steps = absl::GetFlag(FLAGS_lr_decay_steps);
  o.optimizer.lr_decay = absl::GetFlag(FLAGS_lr_decay);
  auto fail = [](const absl::Status& s, int code) {
    std::fprintf(stderr, "omnilearn_server: %s\n", std::string(s.message()).c_str());
    return code;
  };
  auto core = ParameterServerCore::Create(o);
  if (!core.ok()) return fail(core.status(), 2);
  std::unique_ptr<Checkpointer> checkpointer;
  if (absl::Status s = SetUpCheckpoints(core->get(), &checkpointer); !s.ok()) return fail(s, 2);
  auto credentials = MakeServerCredentials(
      {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_client_ca)});
  if (!credentials.ok()) return fail(credentials.status(), 2);
  std::string token;
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(absl::GetFlag(FLAGS_auth_token_file));
    if (!t.ok()) return fail(t.status(), 2);
    token = *t;
  }
  const bool tls = !absl::GetFlag(FLAGS_tls_cert).empty();
  if (!IsLoopbackAddress(absl::GetFlag(FLAGS_bind)) && !tls && token.empty()) {
    std::fprintf(stderr,
                 "omnilearn_server: WARNING: listening on %s with neither TLS nor a token: anyone who can reach "
                 "this port can read and change the model (see --tls_cert, --auth_token_file)\n",
                 absl::GetFlag(FLAGS_bind).c_str());
  }
  metrics::AddProcessMetrics((*core)->registry());
  std::unique_ptr<metrics::MetricsExposer> exposer;
  if (absl::GetFlag(FLAGS_metrics_port) != 0) {
    auto e = metrics::MetricsExposer::Start(absl::GetFlag(FLAGS_metrics_bind), absl::GetFlag(FLAGS_metrics_port),
                                            &(*core)->registry());
    if (!e.ok()) return fail(e.status(), 1);
    exposer = std::move(*e);
  }

  ParameterServerService service(core->get(), absl::Minutes(10), token);
  const std::string address = absl::StrCat(absl::GetFlag(FLAGS_bind), ":", absl::GetFlag(FLAGS_port));
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(address, *credentials, &bound_port);
  // A second server on a busy port must fail, not share it (gRPC allows SO_REUSEPORT by
  // default, which would split the workers between two servers).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    std::fprintf(stderr, "omnilearn_server: cannot listen on %s\n", address.c_str());
    return 1;
  }
  const absl::Time start = absl::Now();
  std::printf("omnilearn_server listening on %s:%d mode=%s controller=%s global_batch=%ld workers=%d tls=%s "
              "token=%s metrics=%s\n",
              absl::GetFlag(FLAGS_bind).c_str(), bound_port, ModeName(o.mode).c_str(),
              controller::PolicyName(o.controller.policy).c_str(), o.controller.global_batch, o.num_workers,
              tls ? (absl::GetFlag(FLAGS_tls_client_ca).empty() ? "on" : "mutual") : "off", token.empty() ? "off" : "on",
              exposer ? absl::StrCat(absl::GetFlag(FLAGS_metrics_bind), ":", exposer->port(), "/metrics").c_str()
                      : "off");
  std::fflush(stdout);

  std::atomic<bool> stopping{false};
  std::thread monitor([&] {
    uint64_t shown = 0;
    while (!stopping.load()) {
      absl::SleepFor(absl::Milliseconds(200));
      if (checkpointer) ReportCheckpoint(checkpointer->MaybeCheckpoint());
      const ServerSnapshot s = (*core)->Snapshot();
      if (!absl::GetFlag(FLAGS_quiet) && s.adjustments != shown) {
        shown = s.adjustments;
        std::printf("%s\n", AdjustmentLine(s).c_str());
        std::fflush(stdout);
      }
    }
  });

  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("omnilearn_server: signal %d, shutting down\n", sig);
  (*core)->Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  stopping.store(true);
  monitor.join();
  int rc = 0;
  if (checkpointer && !ReportCheckpoint(checkpointer->CheckpointNow())) rc = 1;
  if (!absl::GetFlag(FLAGS_export).empty()) {
    absl::StatusOr<CheckpointState> state = (*core)->Capture();
    absl::Status s = state.ok() ? ExportModel(absl::GetFlag(FLAGS_export), state->layout, *state->weights,
                                              state->version)
                                : state.status();
    if (s.ok()) {
      std::printf("omnilearn_server: exported the model (version %lu) to %s\n", state->version,
                  absl::GetFlag(FLAGS_export).c_str());
    } else {
      std::fprintf(stderr, "omnilearn_server: export to %s failed: %s\n", absl::GetFlag(FLAGS_export).c_str(),
                   std::string(s.message()).c_str());
      rc = 1;
    }
  }
  const ServerSnapshot s = (*core)->Snapshot();
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) {
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << SummaryJson(s, wall);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "omnilearn_server: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  std::printf("final: %s\n", AdjustmentLine(s).c_str());
  return rc;
}

}  // namespace
}  // namespace server
}  // namespace omnilearn

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("OmniLearn parameter server: balances mini-batches across heterogeneous workers.");
  absl::ParseCommandLine(argc, argv);
  return omnilearn::server::Run();
}
