// omnilearn_worker: trains a LibTorch model on CPU or CUDA against an OmniLearn server.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/grpc_security.h"
#include "common/metrics.h"
#include "common/metrics_exposer.h"
#include "worker/ps_client.h"
#include "worker/trainer.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "parameter server host:port");
ABSL_FLAG(std::string, name, "worker", "this worker's unique name");
ABSL_FLAG(std::string, host, "", "host name reported to the server (default: hostname)");
ABSL_FLAG(std::string, device, "auto", "cpu | cuda | auto");
ABSL_FLAG(std::string, model, "cnn", "mlp | cnn");
ABSL_FLAG(std::string, model_file, "", "TorchScript module ([B,1,28,28] -> [B,10] logits) instead of --model");
ABSL_FLAG(std::string, dataset, "fashion-mnist", "fashion-mnist | synthetic");
ABSL_FLAG(std::string, data_dir, "", "folder with the Fashion-MNIST .gz IDX files (default: Debian's)");
ABSL_FLAG(int, threads, 1, "LibTorch intra-op threads on CPU");
ABSL_FLAG(double, slowdown, 1.0, "heterogeneity emulation: report (and take) F times the real compute time");
ABSL_FLAG(double, epochs, 1.0, "stop after this many epochs of all workers together (0 = use --max_iterations)");
ABSL_FLAG(int64_t, max_iterations, 0, "stop after this many iterations of this worker (0 = no limit)");
ABSL_FLAG(uint64_t, seed, 1, "model initialization and data order");
ABSL_FLAG(bool, evaluate, false, "evaluate test accuracy at epoch ends and report it");
ABSL_FLAG(int64_t, max_batch, 0, "a batch ceiling this worker knows of (0 = none)");
ABSL_FLAG(double, rpc_timeout, 600, "seconds any call to the server may take");
ABSL_FLAG(double, reconnect_timeout, 300,
          "seconds a server outage is ridden out (retrying with backoff, then joining again) before giving up");
ABSL_FLAG(std::string, init_from, "",
          "start from the weights in this safetensors file (a server --export or checkpoint), matched by name");
ABSL_FLAG(bool, evaluate_only, false, "with --init_from: measure test accuracy, print it and exit (no server)");
ABSL_FLAG(std::string, save_model, "",
          "with --model_file: write the trained TorchScript module here at the end (for torch.jit.load)");
ABSL_FLAG(int, log_every, 50, "iterations between progress lines (0 = none)");
ABSL_FLAG(int, metrics_port, 0, "Prometheus /metrics port for this worker's series (0 = off)");
ABSL_FLAG(std::string, metrics_bind, "0.0.0.0", "address the /metrics endpoint listens on");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA that signed the server's certificate (TLS on)");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate, for servers that require mutual TLS");
ABSL_FLAG(std::string, tls_key, "", "PEM client private key");
ABSL_FLAG(std::string, tls_server_name, "", "name to check the server certificate against (default: --server's host)");
ABSL_FLAG(std::string, auth_token_file, "", "file holding the server's shared bearer token");

namespace {

int Fail(const std::string& name, const absl::Status& s) {
  std::fprintf(stderr, "[%s] error: %s\n", name.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("OmniLearn worker: trains with the mini-batch size the server assigns.");
  absl::ParseCommandLine(argc, argv);
  omnilearn::worker::TrainerOptions o;
  o.name = absl::GetFlag(FLAGS_name);
  o.host = absl::GetFlag(FLAGS_host);
  o.device = absl::GetFlag(FLAGS_device);
  o.model = absl::GetFlag(FLAGS_model);
  o.model_file = absl::GetFlag(FLAGS_model_file);
  o.dataset = absl::GetFlag(FLAGS_dataset);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.slowdown = absl::GetFlag(FLAGS_slowdown);
  o.epochs = absl::GetFlag(FLAGS_epochs);
  o.max_iterations = absl::GetFlag(FLAGS_max_iterations);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.evaluate = absl::GetFlag(FLAGS_evaluate);
  o.max_batch = absl::GetFlag(FLAGS_max_batch);
  o.log_every = absl::GetFlag(FLAGS_log_every);
  o.init_from = absl::GetFlag(FLAGS_init_from);
  o.save_model = absl::GetFlag(FLAGS_save_model);
  if (!(absl::GetFlag(FLAGS_reconnect_timeout) >= 0)) {
    return Fail(o.name, absl::InvalidArgumentError("--reconnect_timeout must be >= 0 seconds"));
  }
  o.reconnect_timeout = absl::Seconds(absl::GetFlag(FLAGS_reconnect_timeout));
  if (!o.save_model.empty() && o.model_file.empty()) {
    return Fail(o.name, absl::InvalidArgumentError("--save_model needs --model_file (a TorchScript module)"));
  }
  if (absl::GetFlag(FLAGS_evaluate_only)) {
    absl::StatusOr<double> accuracy = omnilearn::worker::EvaluateOnly(o);
    if (!accuracy.ok()) return Fail(o.name, accuracy.status());
    std::printf("[%s] %s: test accuracy %.2f%%\n", o.name.c_str(), o.init_from.c_str(), 100 * *accuracy);
    return 0;
  }
  omnilearn::worker::ClientOptions c;
  c.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout));
  c.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    absl::StatusOr<std::string> token = omnilearn::ReadTokenFile(absl::GetFlag(FLAGS_auth_token_file));
    if (!token.ok()) return Fail(o.name, token.status());
    c.auth_token = *token;
  }
  auto client = omnilearn::worker::MakeGrpcPsClient(absl::GetFlag(FLAGS_server), c);
  if (!client.ok()) return Fail(o.name, client.status());

  omnilearn::metrics::Registry registry;
  std::unique_ptr<omnilearn::metrics::MetricsExposer> exposer;
  if (absl::GetFlag(FLAGS_metrics_port) != 0) {
    omnilearn::metrics::AddProcessMetrics(registry);
    auto e = omnilearn::metrics::MetricsExposer::Start(absl::GetFlag(FLAGS_metrics_bind),
                                                       absl::GetFlag(FLAGS_metrics_port), &registry);
    if (!e.ok()) return Fail(o.name, e.status());
    exposer = std::move(*e);
    o.registry = &registry;
  }
  auto result = omnilearn::worker::Train(o, **client);
  if (!result.ok()) return Fail(o.name, result.status());
  std::printf("[%s] done: %ld iterations, last loss %.4f", o.name.c_str(), result->iterations, result->last_loss);
  if (result->test_accuracy >= 0) std::printf(", test accuracy %.2f%%", 100 * result->test_accuracy);
  std::printf("\n");
  return 0;
}
