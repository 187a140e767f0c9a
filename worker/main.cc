// omnilearn_worker: trains a LibTorch model on CPU or CUDA against an OmniLearn server.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flag_checks.h"
#include "common/grpc_security.h"
#include "common/large_buffers.h"
#include "common/metrics.h"
#include "common/metrics_exposer.h"
#include "worker/client/ps_client.h"
#include "worker/devices/device.h"
#include "worker/trainer/model.h"
#include "worker/trainer/trainer.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051",
          "parameter server host:port, or etcd://HOST:PORT[,...][/KEY]: the coordinator elected there (the servers' "
          "--election), looked up at each join");
ABSL_FLAG(std::string, name, "", "this worker's unique name in the job (default: <hostname>-<pid>)");
ABSL_FLAG(std::string, host, "", "host name reported to the server (default: hostname)");
ABSL_FLAG(std::string, device, "auto",
          "cpu | cuda | cuda:N | auto (cuda:0 if LibTorch has CUDA and sees a GPU, else cpu)");
ABSL_FLAG(std::string, optimizer, "",
          "this worker's own optimizer, as torch.optim builds it: sgd | adam | adamw; the job runs it when this worker "
          "brings the job's model (later workers' must be the same); empty: the job's (the server's flags)");
ABSL_FLAG(double, lr, -1, "with --optimizer: its learning rate (default torch.optim's, 1e-3)");
ABSL_FLAG(double, momentum, -1, "with --optimizer=sgd: momentum (default 0, as torch.optim.SGD)");
ABSL_FLAG(double, weight_decay, -1, "with --optimizer: weight decay (default torch.optim's: 0; adamw 0.01)");
ABSL_FLAG(std::string, betas, "", "with --optimizer=adam|adamw: B1,B2 (default 0.9,0.999)");
ABSL_FLAG(double, eps, -1, "with --optimizer=adam|adamw: eps (default 1e-8)");
ABSL_FLAG(std::vector<std::string>, no_decay, {},
          "with --optimizer: parameters whose names end with one of these (e.g. bias,norm.weight) form a second "
          "param group without weight decay");
ABSL_FLAG(std::string, check_device, "",
          "print whether this worker can use the device (cpu, cuda, cuda:N) and exit: 0 yes, 1 no (job scripts)");
ABSL_FLAG(std::string, warmup, "auto",
          "an untimed step after joining and after each batch change: on | off | auto (on for CUDA devices)");
ABSL_FLAG(std::string, model, "cnn", "mlp | cnn | cnn_bn (the CNN with BatchNorm)");
ABSL_FLAG(std::string, model_file, "",
          "TorchScript module (a batch of the data's samples [B,...] -> [B,classes] logits) instead of --model");
ABSL_FLAG(
    std::string, dataset, "fashion-mnist",
    "fashion-mnist | synthetic | tensors:PATH (a safetensors file with train_x, train_y, optional test_x, test_y)");
ABSL_FLAG(int64_t, synthetic_samples, 20000,
          "--dataset=synthetic: training samples (the test split has a tenth); every worker of a job the same");
ABSL_FLAG(std::string, data_dir, "", "folder with the Fashion-MNIST .gz IDX files (default: Debian's)");
ABSL_FLAG(int, threads, 1, "LibTorch intra-op threads on CPU");
ABSL_FLAG(double, slowdown, 1.0, "heterogeneity emulation: report (and take) F times the real compute time");
ABSL_FLAG(std::string, slowdown_schedule, "",
          "time-varying heterogeneity: EPOCH:FACTOR,... (e.g. 0:1,2:4,4:2) by the global epoch the server reports; "
          "--slowdown before the first entry");
ABSL_FLAG(std::string, emulate_device, "",
          "an emulated device: every step takes FIXED_MS + MS_PER_SAMPLE x batch ms (times a normal factor of "
          "relative sd JITTER) after the real compute, e.g. 2:0.5:0.05; by global epoch: 0@2:0.5,1@2:4 "
          "(not with --slowdown)");
ABSL_FLAG(double, epochs, 1.0, "stop after this many epochs of all workers together (0 = use --max_iterations)");
ABSL_FLAG(int64_t, max_iterations, 0, "stop after this many iterations of this worker (0 = no limit)");
ABSL_FLAG(uint64_t, seed, 1,
          "model initialization (the first worker's is the job's); the data order is the server's (--data_seed)");
ABSL_FLAG(bool, evaluate, false, "evaluate test accuracy at epoch ends and report it");
ABSL_FLAG(double, eval_every_epochs, 1.0, "with --evaluate: evaluate every this many global epochs (e.g. 0.25)");
ABSL_FLAG(int64_t, max_batch, 0, "a batch ceiling this worker knows of (0 = none)");
ABSL_FLAG(double, rpc_timeout, 600, "seconds any call to the server may take");
ABSL_FLAG(double, reconnect_timeout, 300,
          "seconds a server outage is ridden out (retrying with backoff, then joining again) before giving up");
ABSL_FLAG(double, bucket_mb, 4,
          "the gradient leaves during backward in buckets of about this many MB, last layers first, so the push "
          "ends shortly after backward does (a server that reads push trailers); 0: whole, after backward");
ABSL_FLAG(double, connect_timeout, 10,
          "seconds to wait for a server never reached yet (not started, or a wrong --server) before giving up; "
          "an address that does not resolve fails at once");
ABSL_FLAG(std::string, init_from, "",
          "start from the weights in this safetensors file (a server --export or checkpoint), matched by name");
ABSL_FLAG(bool, evaluate_only, false, "with --init_from: measure test accuracy, print it and exit (no server)");
ABSL_FLAG(std::string, save_model, "",
          "with --model_file: write the trained TorchScript module here at the end (for torch.jit.load)");
ABSL_FLAG(int, log_every, 50, "iterations between progress lines (0 = none)");
ABSL_FLAG(std::string, log_samples, "", "test aid: write 'epoch id' for every sample this worker trained to this file");
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

std::string DefaultName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "-", getpid());
}

absl::Status CheckFlags() {
  return omnilearn::CheckFlagRanges({
      {"threads", static_cast<double>(absl::GetFlag(FLAGS_threads)), 1, 1024},
      {"slowdown", absl::GetFlag(FLAGS_slowdown), 1, 1000},
      {"epochs", absl::GetFlag(FLAGS_epochs), 0, 1e6},
      {"eval_every_epochs", absl::GetFlag(FLAGS_eval_every_epochs), 0.001, 1e6},
      {"max_iterations", static_cast<double>(absl::GetFlag(FLAGS_max_iterations)), 0, 1e12},
      {"max_batch", static_cast<double>(absl::GetFlag(FLAGS_max_batch)), 0, 1 << 24},
      {"rpc_timeout", absl::GetFlag(FLAGS_rpc_timeout), 0.001, 86400},
      {"reconnect_timeout", absl::GetFlag(FLAGS_reconnect_timeout), 0, 7 * 86400},
      {"connect_timeout", absl::GetFlag(FLAGS_connect_timeout), 0, 7 * 86400},
      {"bucket_mb", absl::GetFlag(FLAGS_bucket_mb), 0, 1 << 20},
      {"log_every", static_cast<double>(absl::GetFlag(FLAGS_log_every)), 0, 1e9},
      {"metrics_port", static_cast<double>(absl::GetFlag(FLAGS_metrics_port)), 0, 65535},
  });
}

// torchrun-style configuration: what the command line leaves out, the environment gives.
absl::Status ApplyEnvironment(int argc, char** argv) {
  return omnilearn::FlagsFromEnvironment(argc, argv,
                                         {{"server", "OMNILEARN_SERVER"},
                                          {"name", "OMNILEARN_NAME"},
                                          {"auth_token_file", "OMNILEARN_AUTH_TOKEN_FILE"},
                                          {"tls_ca", "OMNILEARN_TLS_CA"},
                                          {"tls_cert", "OMNILEARN_TLS_CERT"},
                                          {"tls_key", "OMNILEARN_TLS_KEY"},
                                          {"tls_server_name", "OMNILEARN_TLS_SERVER_NAME"}});
}

// --check_device: says whether LibTorch can use the device; the exit status.
int CheckDevice(const std::string& check) {
  const omnilearn::worker::CudaInfo cuda = omnilearn::worker::ProbeCuda();
  std::string note;
  absl::StatusOr<torch::Device> d = omnilearn::worker::PickDevice(check, cuda, &note);
  std::printf("LibTorch with CUDA: %s; CUDA devices visible: %d\n", cuda.built_with_cuda ? "yes" : "no", cuda.devices);
  if (!d.ok()) {
    std::fprintf(stderr, "cannot use %s: %s\n", check.c_str(), std::string(d.status().message()).c_str());
    return 1;
  }
  std::printf("%s: usable as %s%s%s\n", check.c_str(), d->str().c_str(), note.empty() ? "" : "; ", note.c_str());
  return 0;
}

// The trainer's options from the flags (the name already set).
absl::Status TrainerOptionsFromFlags(omnilearn::worker::TrainerOptions* o) {
  o->host = absl::GetFlag(FLAGS_host);
  o->device = absl::GetFlag(FLAGS_device);
  absl::StatusOr<omnilearn::worker::Warmup> warmup = omnilearn::worker::ParseWarmup(absl::GetFlag(FLAGS_warmup));
  if (!warmup.ok()) return absl::InvalidArgumentError(absl::StrCat("--", warmup.status().message()));
  o->warmup = *warmup;
  o->model = absl::GetFlag(FLAGS_model);
  o->model_file = absl::GetFlag(FLAGS_model_file);
  o->dataset = absl::GetFlag(FLAGS_dataset);
  o->data_dir = absl::GetFlag(FLAGS_data_dir);
  o->synthetic_samples = absl::GetFlag(FLAGS_synthetic_samples);
  o->threads = absl::GetFlag(FLAGS_threads);
  o->slowdown = absl::GetFlag(FLAGS_slowdown);
  o->slowdown_schedule = absl::GetFlag(FLAGS_slowdown_schedule);
  o->emulate_device = absl::GetFlag(FLAGS_emulate_device);
  o->epochs = absl::GetFlag(FLAGS_epochs);
  o->max_iterations = absl::GetFlag(FLAGS_max_iterations);
  o->seed = absl::GetFlag(FLAGS_seed);
  o->evaluate = absl::GetFlag(FLAGS_evaluate);
  o->eval_every_epochs = absl::GetFlag(FLAGS_eval_every_epochs);
  o->max_batch = absl::GetFlag(FLAGS_max_batch);
  o->log_every = absl::GetFlag(FLAGS_log_every);
  o->init_from = absl::GetFlag(FLAGS_init_from);
  o->save_model = absl::GetFlag(FLAGS_save_model);
  o->log_samples = absl::GetFlag(FLAGS_log_samples);
  o->reconnect_timeout = absl::Seconds(absl::GetFlag(FLAGS_reconnect_timeout));
  o->connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout));
  o->bucket_bytes = static_cast<int64_t>(absl::GetFlag(FLAGS_bucket_mb) * (1 << 20));
  o->server_hint = absl::StrCat("--server=", absl::GetFlag(FLAGS_server));
  o->optimizer = {absl::GetFlag(FLAGS_optimizer),    absl::GetFlag(FLAGS_lr),    absl::GetFlag(FLAGS_momentum),
                  absl::GetFlag(FLAGS_weight_decay), absl::GetFlag(FLAGS_betas), absl::GetFlag(FLAGS_eps),
                  absl::GetFlag(FLAGS_no_decay)};
  if (!o->save_model.empty() && o->model_file.empty()) {
    return absl::InvalidArgumentError("--save_model needs --model_file (a TorchScript module)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<omnilearn::worker::PsClient>> ClientFromFlags() {
  omnilearn::worker::ClientOptions c;
  c.rpc_timeout = absl::Seconds(absl::GetFlag(FLAGS_rpc_timeout));
  c.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (!absl::GetFlag(FLAGS_auth_token_file).empty()) {
    absl::StatusOr<std::string> token = omnilearn::ReadTokenFile(absl::GetFlag(FLAGS_auth_token_file));
    if (!token.ok()) return token.status();
    c.auth_token = *token;
  }
  return omnilearn::worker::MakeGrpcPsClient(absl::GetFlag(FLAGS_server), c);
}

// /metrics for this worker's series when --metrics_port asks for it (null otherwise).
absl::StatusOr<std::unique_ptr<omnilearn::metrics::MetricsExposer>> StartMetrics(
    omnilearn::metrics::Registry* registry) {
  if (absl::GetFlag(FLAGS_metrics_port) == 0) return nullptr;
  omnilearn::metrics::AddProcessMetrics(*registry);
  return omnilearn::metrics::MetricsExposer::Start(absl::GetFlag(FLAGS_metrics_bind), absl::GetFlag(FLAGS_metrics_port),
                                                   registry);
}

// SIGINT / SIGTERM (blocked in every thread) are taken here: the worker leaves the job
// after its current step. A worker blocked in a call (a barrier the others never reach)
// cannot leave in time: it is given a bounded while, then goes without leaving.
struct SignalWatch {
  std::atomic<bool> interrupted{false};
  std::atomic<int> signal_number{0};
  std::atomic<bool> done{false};

  void Start(sigset_t signals, const std::string& name) {
    std::thread([this, signals, name] {
      int sig = 0;
      sigwait(&signals, &sig);
      signal_number.store(sig);
      interrupted.store(true);
      std::fprintf(stderr, "[%s] signal %d: leaving the job after the current step\n", name.c_str(), sig);
      for (int i = 0; i < 100 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!done.load()) {
        std::fprintf(stderr, "[%s] still blocked after 10 s: exiting without leaving\n", name.c_str());
        std::fflush(stderr);
        _exit(128 + sig);
      }
    }).detach();
  }
};

// The exit status of a training run, with its last line.
int Report(const std::string& name, const absl::StatusOr<omnilearn::worker::TrainerResult>& result) {
  if (!result.ok()) return Fail(name, result.status());
  std::printf("[%s] done%s: %ld iterations, last loss %.4f", name.c_str(),
              result->stopped_by_server ? " (stopped by the server)" : "", result->iterations, result->last_loss);
  if (result->test_accuracy >= 0) std::printf(", test accuracy %.2f%%", 100 * result->test_accuracy);
  std::printf("; pushes: sent %lu, answered %lu\n", result->pushes_sent, result->pushes_answered);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // SIGINT / SIGTERM are taken by a thread (SignalWatch) so the worker leaves the job
  // before it exits. Blocked first, before any thread exists: threads inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  omnilearn::KeepLargeBuffersInHeap();
  omnilearn::ShowOwnFlagsInHelp({"worker/main.cc"});
  absl::SetProgramUsageMessage(
      "OmniLearn worker: trains the samples and mini-batch sizes the server assigns.\n"
      "  omnilearn_worker --server=HOST:PORT [--name=N] [--device=cpu|cuda|cuda:N|auto] [--model=cnn] [--epochs=E]");
  omnilearn::RefuseUnknownFlags(argc, argv);  // with the nearest flag as a suggestion
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = ApplyEnvironment(argc, argv); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (const std::string check = absl::GetFlag(FLAGS_check_device); !check.empty()) return CheckDevice(check);
  omnilearn::worker::TrainerOptions o;
  o.name = absl::GetFlag(FLAGS_name).empty() ? DefaultName() : absl::GetFlag(FLAGS_name);
  if (absl::Status s = CheckFlags(); !s.ok()) return Fail(o.name, s);
  if (absl::Status s = TrainerOptionsFromFlags(&o); !s.ok()) return Fail(o.name, s);
  if (absl::GetFlag(FLAGS_evaluate_only)) {
    absl::StatusOr<double> accuracy = omnilearn::worker::EvaluateOnly(o);
    if (!accuracy.ok()) return Fail(o.name, accuracy.status());
    std::printf("[%s] %s: test accuracy %.2f%%\n", o.name.c_str(), o.init_from.c_str(), 100 * *accuracy);
    return 0;
  }
  auto client = ClientFromFlags();
  if (!client.ok()) return Fail(o.name, client.status());
  omnilearn::metrics::Registry registry;
  auto exposer = StartMetrics(&registry);
  if (!exposer.ok()) return Fail(o.name, exposer.status());
  if (*exposer) o.registry = &registry;
  SignalWatch watch;
  o.interrupted = &watch.interrupted;
  watch.Start(signals, o.name);
  auto result = omnilearn::worker::Train(o, **client);
  watch.done.store(true);
  if (watch.interrupted.load()) {
    std::fprintf(stderr, "[%s] interrupted: %s\n", o.name.c_str(),
                 result.ok() ? "stopped" : std::string(result.status().message()).c_str());
    return 128 + watch.signal_number.load();
  }
  return Report(o.name, result);
}
