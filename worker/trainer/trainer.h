// The worker's training loop: join, pull, train on the batch size the server gives,
// time forward + loss + backward, push, repeat.
#ifndef OMNILEARN_WORKER_TRAINER_TRAINER_H_
#define OMNILEARN_WORKER_TRAINER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics.h"
#include "worker/client/ps_client.h"
#include "worker/trainer/optimizer_flags.h"

namespace omnilearn {
namespace worker {

// The untimed step after the join and after each batch change: the first steps of a
// shape on a GPU would show the controller times that are not the device's.
enum class Warmup { kAuto, kOn, kOff };  // kAuto: on for CUDA
// "auto", "on" or "off"; InvalidArgument otherwise.
absl::StatusOr<Warmup> ParseWarmup(const std::string& text);

// Every error the trainer returns names the option by its field here; the worker's
// command line names its flags the same.
struct TrainerOptions {
  std::string name;             // unique per worker (main defaults it to host-pid)
  std::string host;             // reported to the server; default: hostname
  std::string device = "auto";  // cpu | cuda | cuda:N | auto (cuda:0 when LibTorch has CUDA and a GPU is there)
  Warmup warmup = Warmup::kAuto;
  std::string model = "cnn";              // mlp | cnn | cnn_bn (ignored with model_file)
  std::string model_file;                 // TorchScript module, [B,1,28,28] -> [B,10]
  std::string dataset = "fashion-mnist";  // fashion-mnist | synthetic | tensors:PATH
  int64_t synthetic_samples = 20000;      // the synthetic training set's size (test: a tenth)
  std::string data_dir;                   // default: Debian's /usr/share/datasets/fashion-mnist
  int threads = 1;                        // intra-op threads for LibTorch on CPU
  double slowdown = 1.0;                  // sleeps (slowdown - 1) x compute time after each step
  std::string slowdown_schedule;          // EPOCH:FACTOR,... by global epoch (slowdown before the first)
  // An emulated device: FIXED_MS:MS_PER_SAMPLE[:JITTER] or EPOCH@PROFILE,... (emulated_device.h);
  // empty = real compute. Excludes slowdown.
  std::string emulate_device;
  double eval_every_epochs = 1.0;  // with evaluate: every this much global progress
  // Stop when all workers together trained this many epochs (global samples /
  // training-set size), or after max_iterations of this worker (0 = no limit).
  double epochs = 1.0;
  int64_t max_iterations = 0;
  uint64_t seed = 1;       // model init (first worker) and this worker's data order
  bool evaluate = false;   // evaluate test accuracy at every epoch end and report it
  int64_t max_batch = 0;   // a ceiling this worker knows of (0 = none)
  std::string init_from;   // safetensors export or checkpoint to start from (by tensor name)
  std::string save_model;  // with model_file: write the trained TorchScript module here
  absl::Duration reconnect_timeout = absl::Seconds(300);  // how long a server outage is ridden out
  absl::Duration connect_timeout = absl::Seconds(10);     // how long a server never reached is waited for
  // > 0: the gradient leaves during backward in buckets of about this many bytes
  // (SessionOptions.bucket_bytes); 0: whole, after backward.
  int64_t bucket_bytes = int64_t{4} << 20;
  std::string server_hint;  // how the server was named, for a never-reached error (SessionOptions)
  int log_every = 50;       // iterations between progress lines (0 = none)
  // Where the progress lines go ("[name] ...", ProgressReporter); null = stdout.
  std::function<void(const std::string&)> log;
  // Test aid: write "epoch id" for every sample of every applied push to this file.
  std::string log_samples;
  // Set by a signal handler: the worker leaves the job and Train returns Cancelled.
  const std::atomic<bool>* interrupted = nullptr;
  // The worker's own optimizer (--optimizer and its flags); kind empty: the job's.
  OptimizerFlags optimizer;
  // Where to record the omnilearn_trainer_* series (step and communication times,
  // batch size, ...); null = none. Must outlive Train.
  metrics::Registry* registry = nullptr;
};

struct TrainerResult {
  int64_t iterations = 0;
  double last_loss = 0;
  double test_accuracy = -1;                      // -1 when not evaluated
  bool stopped_by_server = false;                 // the server ended the job (shutting down)
  uint64_t pushes_sent = 0, pushes_answered = 0;  // Session::pushes_sent/answered
};

// Loads the model (built-in or model_file) with init_from's weights and measures its
// test accuracy (0..1). No server. InvalidArgument without init_from or for a file that
// does not fit the model.
absl::StatusOr<double> EvaluateOnly(const TrainerOptions& options);

// Runs until the epochs are done, the server says stop, or an error. Errors:
// InvalidArgument (options, model, data), Unavailable / DeadlineExceeded (server).
absl::StatusOr<TrainerResult> Train(const TrainerOptions& options, PsClient& client);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_TRAINER_TRAINER_H_
