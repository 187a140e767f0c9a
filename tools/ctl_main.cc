// omnilearn_ctl: the operator's view of a running OmniLearn server, over GetStatus.
//   omnilearn_ctl status [--server=HOST:PORT] [--watch=SECONDS] [--json]
// Takes the same --server, token and TLS flags as a worker.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/enum_names.h"
#include "common/etcd_client.h"
#include "common/flag_checks.h"
#include "common/grpc_security.h"
#include "google/protobuf/util/json_util.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/checkpoint/checkpoint_health.h"
#include "server/rpc/shard_wire.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051",
          "parameter server host:port, or etcd://HOST:PORT[,...][/KEY]: the coordinator elected there (--election)");
ABSL_FLAG(double, watch, 0, "refresh every this many seconds until interrupted (0 = once)");
ABSL_FLAG(bool, json, false, "print the status as JSON (the GetStatus reply) for scripts");
ABSL_FLAG(double, timeout, 10, "seconds a call may take");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA that signed the server's certificate (TLS on)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for servers that require mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM client private key");
ABSL_FLAG(std::string, tls_server_name, "", "name to check the server certificate against (default: --server's host)");
ABSL_FLAG(std::string, auth_token_file, "", "file holding the server's shared bearer token");

namespace omnilearn {
namespace {

// A server's checkpoints as the status says them ("v120 4s ago", "FAILING (3): ...").
std::string Checkpoints(const v1::CheckpointStatus& p) {
  absl::StatusOr<server::CheckpointHealthView> view = server::CheckpointsFromProto(p);
  return view.ok() ? server::DescribeCheckpoints(*view) : absl::StrCat("? (", view.status().message(), ")");
}

// The status as a table: the job on one line, then a row per worker (active first).
std::string Table(const v1::GetStatusResponse& s) {
  std::string out = absl::StrFormat("job %d  %s  controller %s  version %d  rounds %d  uptime %.0f s%s\n", s.job(),
                                    EnumName(s.mode()), s.controller(), s.model_version(), s.rounds(),
                                    s.uptime_seconds(), s.job_finished() ? "  FINISHED" : "");
  if (s.dataset_size() > 0) {
    absl::StrAppend(&out, absl::StrFormat("epoch %.2f (%d samples of %d per epoch)  ",
                                          static_cast<double>(s.global_samples()) / s.dataset_size(),
                                          s.global_samples(), s.dataset_size()));
  } else {
    absl::StrAppend(&out, absl::StrFormat("%d samples  ", s.global_samples()));
  }
  absl::StrAppend(
      &out, absl::StrFormat("global batch %d  loss %.4f  %s %s  plan spread %.2f (%d changes)\n", s.global_batch_size(),
                            s.last_train_loss(), s.accuracy_is_validation() ? "validation accuracy" : "accuracy",
                            s.has_test_accuracy()
                                ? absl::StrFormat("%.2f%% (v%d)", 100 * s.test_accuracy(), s.test_accuracy_version())
                                : std::string("-"),
                            s.predicted_spread(), s.plan_changes()));
  if (s.has_checkpoints()) absl::StrAppend(&out, "checkpoints ", Checkpoints(s.checkpoints()), "\n");
  absl::StrAppend(
      &out, absl::StrFormat("%-20s %-16s %-6s %-8s %6s %12s %10s %10s %8s %8s %8s\n", "WORKER", "HOST", "DEVICE",
                            "STATE", "BATCH", "MEAN COMPUTE", "ITERATIONS", "SAMPLES", "VERSION", "LOSS", "OVERRUNS"));
  std::vector<const v1::WorkerStatus*> rows;
  for (const v1::WorkerStatus& w : s.workers()) rows.push_back(&w);
  std::stable_sort(rows.begin(), rows.end(), [](const v1::WorkerStatus* a, const v1::WorkerStatus* b) {
    return (a->state() == v1::WORKER_STATE_LEFT) < (b->state() == v1::WORKER_STATE_LEFT);
  });
  for (const v1::WorkerStatus* w : rows) {
    absl::StrAppend(&out, absl::StrFormat("%-20s %-16s %-6s %-8s %6d %10.1f ms %10d %10d %8d %8.4f %8d\n", w->name(),
                                          w->host(), EnumName(w->device()), EnumName(w->state()), w->batch_size(),
                                          1000 * w->mean_compute_seconds(), w->iterations(), w->samples(),
                                          w->last_model_version(), w->last_train_loss(), w->emulation_overruns()));
  }
  if (s.shards_size() > 0) {
    absl::StrAppend(&out, absl::StrFormat("%-6s %-24s %-13s %10s %10s %7s  %s\n", "SHARD", "ADDRESS", "STATE",
                                          "SLICE MB", "STEPS SENT", "QUEUED", "CHECKPOINTS"));
    for (const v1::ShardStatus& sh : s.shards()) {
      absl::StrAppend(&out, absl::StrFormat("%-6d %-24s %-13s %10.2f %10d %7d  %s\n", sh.index(), sh.address(),
                                            sh.connected() ? std::string("connected")
                                                           : absl::StrFormat("MISSING %.0fs", sh.missing_seconds()),
                                            sh.slice_bytes() / 1048576.0, sh.steps_sent(), sh.queued_commands(),
                                            sh.has_checkpoints() ? Checkpoints(sh.checkpoints()) : "-"));
    }
  }
  return out;
}

// The status as one line of JSON (every field, the proto's names).
std::string Json(const v1::GetStatusResponse& status) {
  std::string text;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(status, &text, o);
  return text + "\n";
}

// --server as given, or the coordinator elected in etcd (--server=etcd://...).
absl::StatusOr<std::string> ServerAddress(const std::string& server) {
  if (!IsEtcdAddress(server)) return server;
  absl::StatusOr<EtcdTarget> target = ParseEtcdTarget(server);
  if (!target.ok()) return target.status();
  return EtcdClient(*target).Coordinator();
}

int Run(const std::vector<char*>& args) {
  if (args.size() != 2 || std::string(args[1]) != "status") {
    std::fprintf(stderr, "usage: omnilearn_ctl status [--server=HOST:PORT] [--watch=S] [--json] (see --help)\n");
    return 2;
  }
  if (absl::Status s = CheckFlagRanges(
          {{"watch", absl::GetFlag(FLAGS_watch), 0, 86400}, {"timeout", absl::GetFlag(FLAGS_timeout), 0.001, 3600}});
      !s.ok()) {
    std::fprintf(stderr, "omnilearn_ctl: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  auto credentials = MakeChannelCredentials(
      {absl::GetFlag(FLAGS_tls_ca), absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key)});
  if (!credentials.ok()) {
    std::fprintf(stderr, "omnilearn_ctl: %s\n", std::string(credentials.status().message()).c_str());
    return 2;
  }
  std::string token;
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(absl::GetFlag(FLAGS_auth_token_file));
    if (!t.ok()) {
      std::fprintf(stderr, "omnilearn_ctl: %s\n", std::string(t.status().message()).c_str());
      return 2;
    }
    token = *t;
  }
  absl::StatusOr<std::string> address = ServerAddress(absl::GetFlag(FLAGS_server));
  if (!address.ok()) {
    std::fprintf(stderr, "omnilearn_ctl: %s\n", std::string(address.status().message()).c_str());
    return absl::IsInvalidArgument(address.status()) ? 2 : 1;
  }
  grpc::ChannelArguments channel_args;
  if (!absl::GetFlag(FLAGS_tls_server_name).empty())
    channel_args.SetSslTargetNameOverride(absl::GetFlag(FLAGS_tls_server_name));
  auto stub = v1::ParameterServer::NewStub(grpc::CreateCustomChannel(*address, *credentials, channel_args));
  const double watch = absl::GetFlag(FLAGS_watch);
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(1000 * absl::GetFlag(FLAGS_timeout))));
    AddBearerToken(ctx, token);
    v1::GetStatusResponse status;
    grpc::Status s = stub->GetStatus(&ctx, v1::GetStatusRequest(), &status);
    if (!s.ok()) {
      std::fprintf(stderr, "omnilearn_ctl: %s: %s (%d)\n", address->c_str(), s.error_message().c_str(),
                   static_cast<int>(s.error_code()));
      return 1;
    }
    const std::string text = absl::GetFlag(FLAGS_json) ? Json(status) : Table(status);
    if (watch > 0 && isatty(STDOUT_FILENO)) std::printf("\033[H\033[2J");  // clear the terminal between views
    std::printf("%s", text.c_str());
    std::fflush(stdout);
    if (watch <= 0) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
    if (!isatty(STDOUT_FILENO)) std::printf("\n");
  }
}

}  // namespace
}  // namespace omnilearn

int main(int argc, char** argv) {
  omnilearn::ShowOwnFlagsInHelp({"tools/ctl_main.cc"});
  absl::SetProgramUsageMessage(
      "omnilearn_ctl: the status of a running OmniLearn server.\n"
      "  omnilearn_ctl status [--server=HOST:PORT] [--watch=SECONDS] [--json] [--auth_token_file=F] [--tls_ca=F]");
  omnilearn::RefuseUnknownFlags(argc, argv);  // with the nearest flag as a suggestion
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  return omnilearn::Run(args);
}
