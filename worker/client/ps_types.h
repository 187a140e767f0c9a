// What a worker and the parameter server say to each other, in the worker's own terms.
// The session, the trainer and the Python core speak these; only the gRPC client
// (grpc_ps_client.cc) knows the proto and its wire form. Plain values, no LibTorch.
#ifndef OMNILEARN_WORKER_CLIENT_PS_TYPES_H_
#define OMNILEARN_WORKER_CLIENT_PS_TYPES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/sample_span.h"
#include "common/training_mode.h"

namespace omnilearn {
namespace worker {

// What the server tells a worker to do next.
enum class Action {
  kContinue,  // train the next step (with the batch and samples the reply brings)
  kRejoin,    // the session is gone (lease expired, server restarted): join again
  kStop,      // training is over, or the server is shutting down
};

using ::omnilearn::Mode;
// ModeName, or "unknown" before a join told the mode.
const char* ModeName(std::optional<Mode> mode);

enum class DeviceKind { kCpu, kCuda };

// The samples the server assigned for the next mini-batch (its size is their count,
// CountSamples); empty when the server assigns none and the worker picks its own.
using Assignment = SampleBatch;

// Who joins: the worker as the server's controller and sampler need to know it.
// A worker's own optimizer (a torch.optim object, mirrored: JoinHeader.optimizer): the job
// runs it when this worker brings the job's model; later workers' must equal it.
struct OptimizerChoice {
  struct Group {
    std::vector<std::string> tensors;  // the layout's names
    double lr = 0;
    double weight_decay = 0;
    std::map<std::string, double> options;  // the group's own hyperparameters
  };
  std::string
      kind;  // torch.optim's class in lower case: "sgd", "rmsprop", ... (the server refuses one it does not run)
  double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0;
  std::map<std::string, double> options;  // every other hyperparameter by torch.optim's name
  std::vector<Group> groups;              // torch.optim's param_groups; empty: one of every parameter
};

struct WorkerInfo {
  std::string name;  // unique per worker process
  std::string host;
  DeviceKind device = DeviceKind::kCpu;
  int64_t max_batch_size = 0;  // a ceiling the worker knows of; 0 = none
  uint64_t dataset_size = 0;   // the training set's size: the server assigns its samples
  // The samples the job trains in all (epochs x dataset_size, rounded up; JobSamples):
  // the server hands out none past them. 0: the worker stops by itself.
  uint64_t job_samples = 0;
  std::optional<OptimizerChoice> optimizer;  // none: the job's
  bool takes_local_steps = false;            // it splits a batch into local steps when asked
};

// What a worker of `epochs` epochs of a `dataset_size`-sample set trains in all: the
// worker's own end test (TrainingDone) holds exactly there.
inline uint64_t JobSamples(double epochs, uint64_t dataset_size) {
  if (!(epochs > 0) || dataset_size == 0) return 0;
  const double total = epochs * static_cast<double>(dataset_size);
  const uint64_t whole = static_cast<uint64_t>(total);
  return static_cast<double>(whole) < total ? whole + 1 : whole;
}

// The end of a worker's training loop, one rule for the C++ worker and the Python library
// (bound as omnilearn._core.training_done): the job's global samples reached epochs x
// dataset_size (epochs > 0), or this worker ran its own max_iterations (> 0).
inline bool TrainingDone(uint64_t global_samples, double epochs, uint64_t dataset_size, int64_t iterations,
                         int64_t max_iterations) {
  const uint64_t job = JobSamples(epochs, dataset_size);
  return (job > 0 && global_samples >= job) || (max_iterations > 0 && iterations >= max_iterations);
}

// One Join call (the session fills in everything but `worker`).
struct JoinRequest {
  WorkerInfo worker;
  bool has_initial_parameters = false;  // the model's values follow (a server with none)
  uint64_t resume_worker_id = 0;        // a live session of ours to replace, proven by
  std::string resume_secret;            //   its secret (after a network fault)
};

struct JoinReply {
  // No session: the server holds no model this worker may train; join again with the
  // initial parameters (JoinRequest::has_initial_parameters). `message` says why.
  bool send_model = false;
  std::string message;
  Action action = Action::kContinue;  // kStop: the server is shutting down, or its job is finished
  bool job_finished = false;          // with kStop: the job is complete (global_samples trained)
  uint64_t finished_version = 0;      // ...its model's version
  uint64_t worker_id = 0;
  std::string session_secret;   // sent with every later call of the session
  double lease_seconds = 0;     // heartbeat or push at least this often
  std::optional<Mode> mode;     // none: a server that did not say
  int local_steps = 1;          // > 1: each batch is that many steps of the worker's own optimizer
  int64_t local_batch = 0;      // > 0: each batch is steps of this many samples (instead)
  int64_t batch_size = 0;       // the first mini-batch's
  Assignment samples;           // the first mini-batch's samples
  bool idle = false;            // the job's samples are all handed out: none for this worker now
  uint64_t global_samples = 0;  // trained by all workers so far (the global epoch)
  bool push_trailer = false;    // the server reads streamed pushes (a header, buckets, a trailer)
  bool bfloat16 = false;        // the session's gradients and models travel as bfloat16
  // A sharded job (JoinResponse.shard_map): the slices' servers, addresses[0] the coordinator.
  int shards = 1;
  int64_t partition_bytes = 0;
  uint64_t shard_fingerprint = 0;
  std::vector<std::string> shard_addresses;
  bool push_slices_in_order = false;  // ShardMap.push_in_order: one slice's push after the other
  bool whole_tensors = false;         // ShardMap.whole_tensors: the map cuts no tensor
};

// What a step came to, known only once its backward is done: a streamed push's trailer.
struct StepEnd {
  double compute_seconds = 0;           // forward + loss + backward, device synchronized
  double train_loss = 0;                // the mini-batch's mean loss
  std::optional<double> test_accuracy;  // in [0, 1], measured on the model this step trained on
  bool accuracy_is_validation = false;  // test_accuracy is of validation data, not a test set
  // Each param group's rate when the worker's scheduler changed it since the last push
  // (PushHeader.group_lr); empty: unchanged.
  std::vector<double> group_lr;
  // The worker's emulated steps that overran so far, this one counted (unset: no emulated device).
  std::optional<uint64_t> emulation_overruns;
};

// A step as pushed with its gradient.
struct StepReport {
  int64_t batch_size = 0;  // samples the gradient was averaged over
  // The previous step's communication: the server takes out its own wait and the
  // controller learns this worker's link time from the rest.
  double communication_seconds = 0;
  StepEnd end;
  bool out_of_memory = false;  // the step did not fit: no gradient, the controller learns the ceiling
  bool report_only = false;    // no gradient: only the accuracy and loss of the model held
  bool idle = false;           // no gradient: the worker holds no samples (PushReply::idle)
  // Emulated devices: steps so far whose real compute outlasted their emulated time.
  uint64_t emulation_overruns = 0;
  // A sharded job: the longest a shard held this worker's previous push (the sharded client
  // fills it in from the shards' replies; PushReply::held_seconds).
  double shard_held_seconds = 0;
};

// A push as the client sends it: the step, and the session and model it belongs to.
struct PushedStep {
  uint64_t worker_id = 0;
  uint64_t model_version = 0;  // the version the gradient was computed on
  StepReport step;
  bool resend = false;  // a shard's slice again, after a transport error (PushHeader.resend)
};

struct PushReply {
  Action action = Action::kContinue;
  bool applied = false;         // false when the push was left out (a late round, an out-of-memory report)
  std::string message;          // why, when not applied
  uint64_t model_version = 0;   // the server's after this push
  int64_t next_batch_size = 0;  // 0: unchanged
  Assignment samples;           // the next mini-batch's; empty: unchanged, unless `idle`
  // The job's samples are all handed out and none is this worker's: it trains nothing and
  // idles (Session::Idle) until the job's count is reached or samples come back to it.
  bool idle = false;
  uint64_t global_samples = 0;
  double held_seconds = 0;  // how long the server held the push after it arrived
  // A sharded job: the shards' slices sent again after a transport error, and the error
  // ("slice 2 (Socket closed)"); empty when none was.
  std::string resent;
};

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_PS_TYPES_H_
