// Every flag of omnilearn_server, read once (ReadFlags) into plain values: the daemon's
// parts (options.h, peers.h, resume.h, ...) take a DaemonFlags, never the flags
// themselves, so each is tested with the values it is given. The defaults here are the
// flags' (flags.cc defines them, with their help).
#ifndef OMNILEARN_SERVER_DAEMON_FLAGS_H_
#define OMNILEARN_SERVER_DAEMON_FLAGS_H_

#include <cstdint>
#include <string>

namespace omnilearn {
namespace server {

struct DaemonFlags {
  int port = 50051;
  std::string bind = "0.0.0.0";
  int shards = 1;
  double partition_mb = 0;  // 0: chosen from the model and the shards (common/shard_map.h)
  bool push_slices_in_order = false;
  bool shard_steps_ahead = false;
  bool replicate_slices = true;
  std::string coordinator = "";  // HOST:PORT, or etcd://... (the elected one)
  std::string election = "";     // etcd://...: a candidate coordinator
  double election_ttl_s = 6;
  int shard_index = 0;
  std::string advertise = "";
  std::string mode = "sync";
  int staleness_bound = 4;
  int local_steps = 1;
  int64_t local_batch = 0;
  int num_workers = 1;
  int start_timeout_s = 300;
  std::string optimizer = "sgd";
  std::string aggregation = "weighted";
  std::string lr_scaling = "on";
  std::string staleness_damping = "on";
  std::string adam_sqrt_scaling = "on";
  std::string adam_weight_prediction = "on";
  double lr = 0.05;
  double momentum = -1;      // < 0: the optimizer's default (momentum, beta1, beta2)
  double weight_decay = -1;  // < 0: torch.optim's default for the optimizer (OptionsFromFlags)
  double beta1 = -1;
  double beta2 = -1;
  double eps = -1;                // < 0: the optimizer's default
  std::string optimizer_options;  // name=value,...
  std::string lr_schedule = "";
  uint64_t warmup_steps = 0;
  uint64_t lr_decay_steps = 0;
  double lr_decay_epochs = 0;
  double lr_decay = 0.1;
  uint64_t cosine_steps = 0;
  double lr_min = 0;
  double clip_grad_norm = 0;
  int64_t max_model_bytes = int64_t{4} << 30;
  uint64_t data_seed = 1;
  std::string wire_dtype = "f32";
  double round_timeout_s = 30;
  double lease_s = 60;
  double stream_idle_timeout_s = 60;
  int max_rpc_threads = 1024;
  std::string summary_json = "";
  bool quiet = false;
  double progress_every_s = 10;
  bool exit_when_done = false;
  bool reset_when_done = false;
  double shutdown_grace_s = 10;
  int metrics_port = 9400;
  std::string metrics_bind = "0.0.0.0";
  std::string tls_cert = "";
  std::string tls_key = "";
  std::string tls_client_ca = "";
  std::string peer_tls_ca = "";
  std::string auth_token_file = "";
  std::string peer_token_file = "";
  std::string checkpoint_dir = "";
  double checkpoint_every_s = 60;
  int checkpoint_keep = 3;
  double memory_checkpoint_every_s = 2;  // a sharded job without --checkpoint_dir
  bool fresh = false;
  std::string export_path = "";
};

// After absl::ParseCommandLine: the flags' values, the deprecated names of earlier
// releases applied to the new ones (with a warning that names the new flag).
DaemonFlags ReadFlags();

}  // namespace server
}  // namespace omnilearn

#endif  // OMNILEARN_SERVER_DAEMON_FLAGS_H_
