#include "server/daemon/lifecycle.h"

#include <time.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/tensor_codec.h"
#include "controller/batch_controller.h"
#include "server/daemon/resume.h"
#include "server/daemon/summary.h"

namespace omnilearn {
namespace server {
namespace {

// Local steps, as the start line says them ("" without).
std::string LocalSteps(const ServerOptions& o) {
  if (!o.local()) return "";
  const std::string steps =
      o.local_batch > 0 ? absl::StrCat("of ", o.local_batch, " samples") : absl::StrCat("x", o.local_steps, " a round");
  return absl::StrCat("; local steps ", steps, ": each worker's own optimizer inside, this one outside");
}

}  // namespace

void PrintListening(const DaemonFlags& f, const ServerOptions& o, int port, v1::WireDtype wire_dtype, bool token,
                    const metrics::MetricsExposer* exposer) {
  const bool tls = !f.tls_cert.empty();
  std::printf(
      "omnilearn_server listening on %s:%d mode=%s controller=%s balance=%s wire=%s global_batch=%ld "
      "workers=%d tls=%s token=%s metrics=%s\n",
      f.bind.c_str(), port, ModeName(o.mode), controller::PolicyName(o.controller.policy).c_str(),
      controller::BalanceName(o.controller.balance).c_str(), WireDtypeName(wire_dtype), o.controller.global_batch,
      o.num_workers, tls ? (f.tls_client_ca.empty() ? "on" : "mutual") : "off", token ? "on" : "off",
      exposer ? absl::StrCat(f.metrics_bind, ":", exposer->port(), "/metrics").c_str() : "off");
  // What runs, spelled as torch.optim would: the server's defaults are its own (README).
  std::printf("omnilearn_server optimizer: %s%s\n", DescribeOptimizer(o.optimizer).c_str(), LocalSteps(o).c_str());
  std::fflush(stdout);
}

void Monitor(const DaemonFlags& f, ParameterServerCore* core, Checkpointer* checkpointer, CoordinatorShards* shards,
             const std::atomic<bool>* stopping) {
  absl::Time last_waiting = absl::Now();
  uint64_t shown_changes = 0;
  const absl::Duration progress_every = absl::Seconds(f.progress_every_s);
  absl::Time last_progress = absl::Now();
  // From what a resumed job had trained already: a rate counts this run's samples only.
  uint64_t last_samples = core->Snapshot().global_samples, last_job = 1;
  while (!stopping->load()) {
    absl::SleepFor(absl::Milliseconds(200));
    if (checkpointer != nullptr) ReportCheckpoint(checkpointer->MaybeCheckpoint());
    if (shards != nullptr && absl::Now() - last_waiting >= absl::Seconds(5)) {
      last_waiting = absl::Now();
      if (const std::string line = shards->WaitingLine(); !line.empty()) {
        std::printf("omnilearn_server: %s\n", line.c_str());
        std::fflush(stdout);
      }
    }
    const ServerSnapshot s = core->Snapshot();
    if (s.job != last_job) last_job = s.job, last_samples = 0, shown_changes = 0;
    if (f.quiet) continue;
    if (s.plan_changes != shown_changes) {  // a line only when the batch plan changed
      shown_changes = s.plan_changes;
      std::printf("%s\n", AdjustmentLine(s).c_str());
      std::fflush(stdout);
    }
    const absl::Time now = absl::Now();
    if (progress_every > absl::ZeroDuration() && now - last_progress >= progress_every && s.version > 0 &&
        !s.job_finished) {
      std::printf("%s\n", ProgressLine(s, last_samples, now - last_progress).c_str());
      std::fflush(stdout);
      last_progress = now;
      last_samples = s.global_samples;
    }
  }
}

void AwaitSignalOrEnd(const DaemonFlags& f, const sigset_t& signals, ParameterServerCore* core) {
  const timespec tick = {0, 200 * 1000 * 1000};
  while (true) {
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig > 0) {
      std::printf("omnilearn_server: signal %d: shutting down; telling the workers to stop\n", sig);
      break;
    }
    // A worker restarted late (waiting for its old session's name) or cut off at the end
    // (its lease expired) is told the job is over rather than finding no server.
    if (f.exit_when_done && core->Snapshot().job_finished && !core->RejoinAwaited()) {
      std::printf("omnilearn_server: the job is finished: exiting (--exit_when_done)\n");
      break;
    }
  }
  std::fflush(stdout);
}

void TellWorkersToStop(const DaemonFlags& f, ParameterServerCore* core) {
  core->Shutdown();
  const absl::Duration grace = absl::Seconds(f.shutdown_grace_s);
  if (!core->AwaitWorkersStopped(core->clock().Now() + grace)) {
    std::printf("omnilearn_server: not every worker was told to stop within %.0f s (--shutdown_grace_s)\n",
                absl::ToDoubleSeconds(grace));
  }
}

}  // namespace server
}  // namespace omnilearn
