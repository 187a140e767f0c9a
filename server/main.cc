// omnilearn_server: the OmniLearn parameter-server daemon. The flags are read once into
// DaemonFlags (server/daemon/flags.h); a server with --coordinator is a shard server
// (server/daemon/shard_daemon.h), any other one server or a sharded job's coordinator
// (server/daemon/coordinator_daemon.h).
#include <signal.h>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/flag_checks.h"
#include "common/large_buffers.h"
#include "server/daemon/coordinator_daemon.h"
#include "server/daemon/flags.h"
#include "server/daemon/shard_daemon.h"

int main(int argc, char** argv) {
  omnilearn::KeepLargeBuffersInHeap();
  omnilearn::ShowOwnFlagsInHelp({"server/daemon/flags.cc", "controller/controller_flags.cc"});
  absl::SetProgramUsageMessage(
      "OmniLearn parameter server: holds the model, assigns every worker its samples and a mini-batch\n"
      "proportional to its speed, applies gradients (sync, async or ssp).\n"
      "  omnilearn_server --num_workers=N [--mode=sync|async|ssp] [--port=50051] [--checkpoint_dir=D] "
      "[--exit_when_done]");
  omnilearn::RefuseUnknownFlags(argc, argv);  // with the nearest flag as a suggestion
  absl::ParseCommandLine(argc, argv);
  const omnilearn::server::DaemonFlags flags = omnilearn::server::ReadFlags();
  // SIGTERM / SIGINT are taken by sigtimedwait in the daemons, so shutdown runs outside
  // signal context. Blocked first, before any thread exists (civetweb's, gRPC's): threads
  // inherit the mask, and one that left them unblocked would let a SIGTERM kill the
  // process before the summary is written.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (!flags.coordinator.empty()) return omnilearn::server::RunShard(flags, signals);
  return omnilearn::server::RunCoordinator(flags, signals);
}
