#include "server/checkpoint/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/atomic_file.h"
#include "common/safetensors.h"
#include "nlohmann/json.hpp"
#include "server/checkpoint/optimizer_json.h"

namespace omnilearn {
namespace server {
namespace {

constexpr char kPrefix[] = "ckpt-";
constexpr char kSuffix[] = ".safetensors";

std::string ControllerJson(const std::map<std::string, controller::WorkerMemory>& memories) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, m] : memories) {
    nlohmann::json history = nlohmann::json::array();
    for (const auto& o : m.history) history.push_back({o.batch, o.mean_seconds, o.samples, o.m2});
    out[name] = {{"batch", m.batch}, {"guard_max", m.guard_max}, {"history", history}};
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::map<std::string, controller::WorkerMemory>> ParseControllerJson(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [] { return absl::InvalidArgumentError("checkpoint: malformed controller state"); };
  if (j.is_discarded() || !j.is_object()) return bad();
  std::map<std::string, controller::WorkerMemory> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const nlohmann::json& v = it.value();
    if (!v.is_object() || !v.contains("batch") || !v["batch"].is_number_integer() || !v.contains("guard_max") ||
        !v["guard_max"].is_number_integer() || !v.contains("history") || !v["history"].is_array()) {
      return bad();
    }
    controller::WorkerMemory m;
    m.batch = v["batch"].get<int64_t>();
    m.guard_max = v["guard_max"].get<int64_t>();
    for (const nlohmann::json& o : v["history"]) {
      if (!o.is_array() || o.size() != 4 || !o[0].is_number_integer()) return bad();
      for (int k = 1; k < 4; ++k) {
        if (!o[k].is_number()) return bad();
      }
      m.history.push_back({o[0].get<int64_t>(), o[1].get<double>(), o[2].get<double>(), o[3].get<double>()});
    }
    out[it.key()] = std::move(m);
  }
  return out;
}

std::string BufferNamesJson(const ModelLayout& layout) {
  nlohmann::json names = nlohmann::json::array();
  for (const TensorSpec& t : layout.tensors()) {
    if (t.buffer) names.push_back(t.name);
  }
  return names.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// {"name": "I64", ...} for the tensors the model holds in another type than float32 (a
// checkpoint keeps the server's float32 values; an export writes the model's types).
std::string DtypesJson(const ModelLayout& layout) {
  nlohmann::json dtypes = nlohmann::json::object();
  for (const TensorSpec& t : layout.tensors()) {
    if (t.dtype != "F32") dtypes[t.name] = t.dtype;
  }
  return dtypes.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The layout read back from a file, with the tensors named in `buffers_json` marked as
// buffers and those in `dtypes_json` given their model's type.
absl::StatusOr<ModelLayout> MarkKinds(const ModelLayout& layout, const std::string& buffers_json,
                                      const std::string& dtypes_json) {
  std::vector<TensorSpec> specs = layout.tensors();
  if (!buffers_json.empty()) {  // empty: written before buffers existed
    const nlohmann::json names = nlohmann::json::parse(buffers_json, nullptr, /*allow_exceptions=*/false);
    if (names.is_discarded() || !names.is_array()) {
      return absl::InvalidArgumentError("checkpoint: malformed buffer list");
    }
    for (const nlohmann::json& n : names) {
      const int i = n.is_string() ? layout.Find(n.get<std::string>()) : -1;
      if (i < 0) return absl::InvalidArgumentError("checkpoint: the buffer list names a tensor it does not hold");
      specs[i].buffer = true;
    }
  }
  if (!dtypes_json.empty()) {  // empty: written before dtypes were kept
    const nlohmann::json dtypes = nlohmann::json::parse(dtypes_json, nullptr, /*allow_exceptions=*/false);
    if (dtypes.is_discarded() || !dtypes.is_object()) return absl::InvalidArgumentError("checkpoint: malformed dtypes");
    for (auto it = dtypes.begin(); it != dtypes.end(); ++it) {
      const int i = layout.Find(it.key());
      if (i < 0 || !it.value().is_string()) {
        return absl::InvalidArgumentError("checkpoint: the dtype list names a tensor it does not hold");
      }
      specs[i].dtype = it.value().get<std::string>();
    }
  }
  return ModelLayout::Create(std::move(specs));  // checks each dtype
}

std::string ShardedJobJson(const ShardedJob& job) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorSpec& t : job.layout.tensors()) tensors.push_back({t.name, t.shape, t.buffer, t.dtype});
  nlohmann::json j{{"shards", job.shards}, {"partition_bytes", job.partition_bytes}, {"tensors", tensors}};
  if (job.whole_tensors) j["whole_tensors"] = true;  // absent: a cut map (and an earlier release's)
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Empty text: not a sharded job's coordinator.
absl::StatusOr<std::optional<ShardedJob>> ParseShardedJobJson(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [] { return absl::InvalidArgumentError("checkpoint: malformed sharded job"); };
  if (j.is_discarded() || !j.is_object() || !j.contains("shards") || !j["shards"].is_number_unsigned() ||
      !j.contains("partition_bytes") || !j["partition_bytes"].is_number_unsigned() || !j.contains("tensors") ||
      !j["tensors"].is_array()) {
    return bad();
  }
  std::vector<TensorSpec> specs;
  for (const nlohmann::json& t : j["tensors"]) {
    // [name, shape, buffer, dtype]; the dtype was added later.
    if (!t.is_array() || t.size() < 3 || t.size() > 4 || !t[0].is_string() || !t[1].is_array() || !t[2].is_boolean() ||
        (t.size() == 4 && !t[3].is_string())) {
      return bad();
    }
    TensorSpec spec{t[0].get<std::string>(), {}, t[2].get<bool>()};
    if (t.size() == 4) spec.dtype = t[3].get<std::string>();
    for (const nlohmann::json& d : t[1]) {
      if (!d.is_number_unsigned()) return bad();
      spec.shape.push_back(d.get<int64_t>());
    }
    specs.push_back(std::move(spec));
  }
  absl::StatusOr<ModelLayout> layout = ModelLayout::Create(std::move(specs));
  if (!layout.ok())
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: sharded job: ", layout.status().message()));
  ShardedJob job;
  job.layout = *std::move(layout);
  job.shards = j["shards"].get<int>();
  job.partition_bytes = j["partition_bytes"].get<int64_t>();
  if (job.shards < 2 || job.partition_bytes < 0) return bad();  // 0: the automatic size
  if (j.contains("whole_tensors")) {
    if (!j["whole_tensors"].is_boolean()) return bad();
    job.whole_tensors = j["whole_tensors"].get<bool>();
  }
  return job;
}

std::string SamplerJson(const SamplerState& s) {
  nlohmann::json pending = nlohmann::json::array();
  for (const auto& [epoch, id] : s.pending) pending.push_back({epoch, id});
  return nlohmann::json{{"dataset_size", s.dataset_size},
                        {"seed", s.seed},
                        {"epoch", s.epoch},
                        {"cursor", s.cursor},
                        {"pending", pending}}
      .dump();
}

absl::StatusOr<SamplerState> ParseSamplerJson(const std::string& text) {
  SamplerState s;
  if (text.empty()) return s;  // written before the server assigned samples
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [] { return absl::InvalidArgumentError("checkpoint: malformed sampler state"); };
  if (j.is_discarded() || !j.is_object()) return bad();
  for (auto [key, field] : {std::pair<const char*, uint64_t*>{"dataset_size", &s.dataset_size},
                            {"seed", &s.seed},
                            {"epoch", &s.epoch},
                            {"cursor", &s.cursor}}) {
    if (!j.contains(key) || !j[key].is_number_unsigned()) return bad();
    *field = j[key].get<uint64_t>();
  }
  if (!j.contains("pending") || !j["pending"].is_array()) return bad();
  for (const nlohmann::json& p : j["pending"]) {
    if (!p.is_array() || p.size() != 2 || !p[0].is_number_unsigned() || !p[1].is_number_unsigned()) return bad();
    s.pending.emplace_back(p[0].get<uint64_t>(), p[1].get<uint64_t>());
  }
  return s;
}

absl::StatusOr<uint64_t> Number(const std::map<std::string, std::string>& meta, const std::string& key) {
  auto it = meta.find(key);
  uint64_t v = 0;
  if (it == meta.end() || !absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint: metadata '", key, "' missing or not a number"));
  }
  return v;
}

// The metadata an earlier release did not write: Adam's time, a shard's slice, the step
// history (16 hex digits).
absl::Status ReadOptional(const std::map<std::string, std::string>& meta, CheckpointState* s) {
  if (auto t = meta.find("omnilearn.adam_time"); t != meta.end()) {
    if (!absl::SimpleAtod(t->second, &s->adam_time) || !(s->adam_time >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: malformed omnilearn.adam_time '", t->second, "'"));
    }
  }
  if (meta.count("omnilearn.slice") > 0) {
    absl::StatusOr<uint64_t> slice = Number(meta, "omnilearn.slice");
    if (!slice.ok()) return slice.status();
    if (*slice > kMaxSliceIndex) return absl::InvalidArgumentError("checkpoint: omnilearn.slice out of range");
    s->slice = static_cast<int>(*slice);
  }
  if (auto h = meta.find("omnilearn.history"); h != meta.end()) {
    if (h->second.size() != 16 || !absl::SimpleHexAtoi(h->second, &s->history)) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: malformed omnilearn.history '", h->second, "'"));
    }
  }
  return absl::OkStatus();
}

// The optimizer's metadata beyond its name and buffers (an earlier release wrote none):
// scalars, a worker's rates, the options it ran and where they came from.
absl::Status ReadOptimizer(std::map<std::string, std::string>& meta, CheckpointState* s) {
  absl::StatusOr<OptimizerScalars> scalars = ParseScalarsJson(meta["omnilearn.optimizer_scalars"]);
  if (!scalars.ok()) return scalars.status();
  s->optimizer_scalars = *std::move(scalars);
  absl::StatusOr<std::vector<double>> rates = ParseRatesJson(meta["omnilearn.group_rates"]);
  if (!rates.ok()) return rates.status();
  s->group_rates = *std::move(rates);
  if (const std::string& options = meta["omnilearn.optimizer_options"]; !options.empty()) {
    absl::StatusOr<OptimizerOptions> o = ParseOptimizerJson(options, OptimizerOptions());
    if (!o.ok()) return o.status();
    s->optimizer_options = *std::move(o);
  }
  s->optimizer_from = meta["omnilearn.optimizer_from"];
  return absl::OkStatus();
}

// The version in "ckpt-<version>.safetensors", or nullopt for other names.
std::optional<uint64_t> VersionOf(const std::string& name) {
  if (!absl::StartsWith(name, kPrefix) || !absl::EndsWith(name, kSuffix)) return std::nullopt;
  uint64_t v = 0;
  const std::string digits = name.substr(strlen(kPrefix), name.size() - strlen(kPrefix) - strlen(kSuffix));
  if (digits.empty() || !absl::SimpleAtoi(digits, &v)) return std::nullopt;
  return v;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) names.push_back(e->d_name);
  closedir(d);
  return names;
}

// Views of the tensors of `layout` in `flat`, named prefix + the layout's names: float32,
// or in the model's own types where `model_dtypes`.
std::vector<TensorView> Views(const ModelLayout& layout, const float* flat, const std::string& prefix = "",
                              bool model_dtypes = false) {
  std::vector<TensorView> views;
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    const TensorSpec& t = layout.tensors()[i];
    views.push_back(
        {prefix + t.name, t.shape, flat + layout.offset(static_cast<int>(i)), model_dtypes ? t.dtype : "F32"});
  }
  return views;
}

// A checkpoint's tensors (viewing the state's buffers) and metadata, as its file holds them.
absl::Status CheckpointContents(const CheckpointState& s, std::vector<TensorView>* out,
                                std::map<std::string, std::string>* meta_out) {
  if (s.weights == nullptr || static_cast<int64_t>(s.weights->size()) != s.layout.total_elements()) {
    return absl::InvalidArgumentError("checkpoint: weights do not match the layout");
  }
  std::vector<TensorView> tensors = Views(s.layout, s.weights->data());
  for (const auto& [buffer, values] : s.optimizer_state) {
    if (values == nullptr || values->size() != s.weights->size()) {
      return absl::InvalidArgumentError("checkpoint: optimizer buffer size");
    }
    for (TensorView& v : Views(s.layout, values->data(), absl::StrCat(kOptimizerPrefix, buffer, "/"))) {
      tensors.push_back(std::move(v));
    }
  }
  std::string buffers;
  for (const auto& [buffer, values] : s.optimizer_state) absl::StrAppend(&buffers, buffers.empty() ? "" : ",", buffer);
  std::map<std::string, std::string> meta = {
      {"format", kCheckpointFormat},
      {"omnilearn.version", absl::StrCat(s.version)},
      {"omnilearn.global_samples", absl::StrCat(s.global_samples)},
      {"omnilearn.rounds", absl::StrCat(s.rounds)},
      {"omnilearn.adjustments", absl::StrCat(s.adjustments)},
      {"omnilearn.mode", s.mode},
      {"omnilearn.optimizer", s.optimizer},
      {"omnilearn.optimizer_buffers", buffers},
      {"omnilearn.lr_schedule_version", absl::StrCat(s.version)},
      {"omnilearn.created_unix", absl::StrCat(absl::ToUnixSeconds(s.created))},
      {"omnilearn.controller", ControllerJson(s.controller)},
      {"omnilearn.model_buffers", BufferNamesJson(s.layout)},
      {"omnilearn.model_dtypes", DtypesJson(s.layout)},
      {"omnilearn.sampler", SamplerJson(s.sampler)},
  };
  if (s.sharded.has_value()) meta["omnilearn.sharded_job"] = ShardedJobJson(*s.sharded);
  if (s.slice != 0) meta["omnilearn.slice"] = absl::StrCat(s.slice);
  if (s.adam_time >= 0) meta["omnilearn.adam_time"] = absl::StrFormat("%.17g", s.adam_time);
  if (s.history != 0) meta["omnilearn.history"] = absl::StrFormat("%016x", s.history);
  if (!s.optimizer_scalars.empty()) meta["omnilearn.optimizer_scalars"] = ScalarsJson(s.optimizer_scalars);
  if (!s.group_rates.empty()) meta["omnilearn.group_rates"] = RatesJson(s.group_rates);
  if (s.optimizer_options.has_value()) meta["omnilearn.optimizer_options"] = OptimizerJson(*s.optimizer_options);
  if (!s.optimizer_from.empty()) meta["omnilearn.optimizer_from"] = s.optimizer_from;
  *out = std::move(tensors);
  *meta_out = std::move(meta);
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteCheckpoint(const std::string& path, const CheckpointState& s) {
  std::vector<TensorView> tensors;
  std::map<std::string, std::string> meta;
  if (absl::Status st = CheckpointContents(s, &tensors, &meta); !st.ok()) return st;
  return WriteSafetensors(path, tensors, meta);
}

absl::StatusOr<std::string> EncodeCheckpoint(const CheckpointState& s) {
  std::vector<TensorView> tensors;
  std::map<std::string, std::string> meta;
  if (absl::Status st = CheckpointContents(s, &tensors, &meta); !st.ok()) return st;
  return EncodeSafetensors(tensors, meta);
}

namespace {

// A checkpoint from its file's contents; `where` names it in errors.
absl::StatusOr<CheckpointState> FromFile(absl::StatusOr<SafetensorsFile> f, const std::string& where) {
  if (!f.ok()) return f.status();
  auto format = f->metadata.find("format");
  if (format == f->metadata.end() || format->second != kCheckpointFormat) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not an OmniLearn checkpoint (format ",
                                                   format == f->metadata.end() ? "missing" : format->second, ")"));
  }
  CheckpointState s;
  absl::StatusOr<ModelLayout> layout = f->Layout({kOptimizerPrefix});
  if (!layout.ok()) return layout.status();
  layout = MarkKinds(*layout, f->metadata["omnilearn.model_buffers"], f->metadata["omnilearn.model_dtypes"]);
  if (!layout.ok()) return layout.status();
  s.layout = std::move(*layout);
  absl::StatusOr<std::vector<float>> weights = f->Gather(s.layout);
  if (!weights.ok()) return weights.status();
  s.weights = std::make_shared<const std::vector<float>>(std::move(*weights));
  const std::string buffers = f->metadata["omnilearn.optimizer_buffers"];
  for (absl::string_view b : absl::StrSplit(buffers, ',', absl::SkipEmpty())) {
    absl::StatusOr<std::vector<float>> v = f->Gather(s.layout, absl::StrCat(kOptimizerPrefix, b, "/"));
    if (!v.ok()) return v.status();
    s.optimizer_state.emplace_back(std::string(b), std::make_shared<const std::vector<float>>(std::move(*v)));
  }
  s.mode = f->metadata["omnilearn.mode"];
  if (absl::Status st = ReadOptional(f->metadata, &s); !st.ok()) return st;
  s.optimizer = f->metadata["omnilearn.optimizer"];
  if (absl::Status st = ReadOptimizer(f->metadata, &s); !st.ok()) return st;
  for (auto [key, field] : {std::pair<const char*, uint64_t*>{"omnilearn.version", &s.version},
                            {"omnilearn.global_samples", &s.global_samples},
                            {"omnilearn.rounds", &s.rounds},
                            {"omnilearn.adjustments", &s.adjustments}}) {
    absl::StatusOr<uint64_t> v = Number(f->metadata, key);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  absl::StatusOr<uint64_t> created = Number(f->metadata, "omnilearn.created_unix");
  if (!created.ok()) return created.status();
  s.created = absl::FromUnixSeconds(static_cast<int64_t>(*created));
  absl::StatusOr<std::map<std::string, controller::WorkerMemory>> c =
      ParseControllerJson(f->metadata["omnilearn.controller"]);
  if (!c.ok()) return c.status();
  s.controller = std::move(*c);
  absl::StatusOr<SamplerState> sampler = ParseSamplerJson(f->metadata["omnilearn.sampler"]);
  if (!sampler.ok()) return sampler.status();
  s.sampler = std::move(*sampler);
  absl::StatusOr<std::optional<ShardedJob>> sharded = ParseShardedJobJson(f->metadata["omnilearn.sharded_job"]);
  if (!sharded.ok()) return sharded.status();
  s.sharded = std::move(*sharded);
  return s;
}

}  // namespace

absl::StatusOr<CheckpointState> ReadCheckpoint(const std::string& path) {
  return FromFile(ReadSafetensors(path), path);
}

absl::StatusOr<CheckpointState> DecodeCheckpoint(const std::string& bytes) {
  return FromFile(ParseSafetensors(bytes), "a replica");
}

absl::Status ExportModel(const std::string& path, const ModelLayout& layout, const std::vector<float>& weights,
                         uint64_t version) {
  if (static_cast<int64_t>(weights.size()) != layout.total_elements()) {
    return absl::InvalidArgumentError("export: weights do not match the layout");
  }
  return WriteSafetensors(path, Views(layout, weights.data(), "", /*model_dtypes=*/true),
                          {{"format", kExportFormat},
                           {"omnilearn.version", absl::StrCat(version)},
                           {"omnilearn.model_buffers", BufferNamesJson(layout)}});
}

CheckpointState CaptureStore(const ParameterStore& store) {
  CheckpointState s;
  s.layout = store.layout();
  s.weights = store.weights();
  s.optimizer_state = store.OptimizerState();
  s.optimizer_scalars = store.ScalarState();
  s.group_rates = store.group_rates();
  s.optimizer = OptimizerName(store.options().kind);
  s.optimizer_options = store.options();
  s.version = store.version();
  s.adam_time = store.adam_time();
  s.history = store.history();
  return s;
}

absl::Status RestoreStore(const CheckpointState& state, ParameterStore* store) {
  if (state.weights == nullptr) return absl::InvalidArgumentError("the checkpoint has no weights");
  if (absl::Status s = store->Restore(state.layout, *state.weights, state.optimizer_state, state.version,
                                      state.adam_time, state.optimizer_scalars, state.group_rates);
      !s.ok()) {
    return s;
  }
  store->set_history(state.history);
  return absl::OkStatus();
}

class CheckpointDir::Lock {
 public:
  // The lock of `dir`, its LOCK file naming this process; FailedPrecondition naming the
  // holder when another process has it.
  static absl::StatusOr<std::shared_ptr<const Lock>> Take(const std::string& dir) {
    const std::string path = absl::StrCat(dir, "/LOCK");
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      char holder[256] = {0};
      const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
      close(fd);
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint directory ", dir, " is in use by another server (",
                       n > 0 ? std::string(absl::StripAsciiWhitespace(absl::string_view(holder, n))) : "unknown holder",
                       "): give every server a directory of its own"));
    }
    char host[128] = {0};
    gethostname(host, sizeof(host) - 1);
    const std::string me = absl::StrFormat("pid %d on %s\n", getpid(), host);
    const bool noted = ftruncate(fd, 0) == 0 && pwrite(fd, me.data(), me.size(), 0) == static_cast<ssize_t>(me.size());
    (void)noted;  // without its note the lock holds all the same
    return std::shared_ptr<const Lock>(new Lock(fd));
  }
  ~Lock() { close(fd_); }  // closing releases the flock

 private:
  explicit Lock(int fd) : fd_(fd) {}
  const int fd_;
};

absl::Status CheckpointDir::Prepare() const {
  // Its missing parents too, like mkdir -p (a shard's own folder under a job's).
  for (size_t slash = dir_.find('/', 1); slash != std::string::npos; slash = dir_.find('/', slash + 1)) {
    (void)mkdir(dir_.substr(0, slash).c_str(), 0755);  // an error shows in the last mkdir
  }
  if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create checkpoint directory ", dir_, ": ", strerror(errno)));
  }
  struct stat st;
  if (stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir ", dir_, " is not a directory"));
  }
  if (access(dir_.c_str(), W_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("checkpoint directory ", dir_, " is not writable"));
  }
  if (lock_ == nullptr) {
    absl::StatusOr<std::shared_ptr<const Lock>> lock = Lock::Take(dir_);
    if (!lock.ok()) return lock.status();
    lock_ = *std::move(lock);
  }
  for (const std::string& name : Entries(dir_)) {
    if (absl::EndsWith(name, kPartialSuffix)) unlink(absl::StrCat(dir_, "/", name).c_str());
  }
  return absl::OkStatus();
}

std::vector<std::pair<uint64_t, std::string>> CheckpointDir::Found() const {
  std::vector<std::pair<uint64_t, std::string>> found;
  for (const std::string& name : Entries(dir_)) {
    if (std::optional<uint64_t> v = VersionOf(name)) found.emplace_back(*v, absl::StrCat(dir_, "/", name));
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

std::vector<std::string> CheckpointDir::List() const {
  std::vector<std::string> out;
  for (auto& [v, path] : Found()) out.push_back(std::move(path));
  return out;
}

std::vector<uint64_t> CheckpointDir::Versions() const {
  std::vector<uint64_t> out;
  for (const auto& [v, path] : Found()) out.push_back(v);
  return out;
}

bool CheckpointDir::Has(uint64_t version) const {
  struct stat st;
  return stat(PathOf(version).c_str(), &st) == 0;
}

std::string CheckpointDir::PathOf(uint64_t version) const {
  return absl::StrFormat("%s/%s%012d%s", dir_, kPrefix, version, kSuffix);
}

absl::StatusOr<CheckpointState> CheckpointDir::Load(uint64_t version) const {
  const std::string path = PathOf(version);
  if (access(path.c_str(), F_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no checkpoint of version ", version, " in ", dir_));
  }
  return ReadCheckpoint(path);
}

absl::Status CheckpointDir::DropNewerThan(uint64_t version) const {
  bool dropped = false;
  for (const auto& [v, path] : Found()) {
    if (v <= version) break;
    if (unlink(path.c_str()) != 0)
      return absl::InternalError(absl::StrCat("cannot delete ", path, ": ", strerror(errno)));
    dropped = true;
  }
  return dropped ? SyncDirectory(dir_) : absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointDir::Write(const CheckpointState& state) const {
  const std::string path = PathOf(state.version);
  if (absl::Status s = WriteCheckpoint(path, state); !s.ok()) return s;
  const std::vector<std::string> all = List();
  for (size_t i = static_cast<size_t>(keep_); i < all.size(); ++i) unlink(all[i].c_str());
  if (all.size() > static_cast<size_t>(keep_)) (void)SyncDirectory(dir_);
  return path;
}

absl::StatusOr<std::optional<std::pair<std::string, CheckpointState>>> CheckpointDir::LoadNewest(
    const std::function<void(const std::string&)>& warn) const {
  for (const std::string& path : List()) {
    absl::StatusOr<CheckpointState> s = ReadCheckpoint(path);
    if (s.ok()) return std::make_optional(std::make_pair(path, std::move(*s)));
    if (s.status().code() != absl::StatusCode::kDataLoss) return s.status();  // not ours to skip silently
    warn(absl::StrCat("skipping unreadable checkpoint ", path, ": ", s.status().message()));
  }
  return std::optional<std::pair<std::string, CheckpointState>>();
}

absl::StatusOr<std::string> CheckpointDir::MoveAside(absl::Time now) const {
  const std::vector<std::string> all = List();
  if (all.empty()) return std::string();
  const std::string aside = absl::StrCat(dir_, "/aside-", absl::ToUnixSeconds(now));
  if (mkdir(aside.c_str(), 0755) != 0) {
    return absl::InternalError(absl::StrCat("cannot create ", aside, ": ", strerror(errno)));
  }
  for (const std::string& path : all) {
    const std::string target = absl::StrCat(aside, path.substr(path.rfind('/')));
    if (rename(path.c_str(), target.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot move ", path, " to ", aside, ": ", strerror(errno)));
    }
  }
  if (absl::Status s = SyncDirectory(dir_); !s.ok()) return s;
  return aside;
}

absl::StatusOr<std::string> MemoryCheckpoints::Write(const CheckpointState& state) const {
  absl::MutexLock lock(&mu_);
  held_[state.version] = state;
  while (held_.size() > static_cast<size_t>(keep_)) held_.erase(held_.begin());
  return std::string();
}

std::vector<uint64_t> MemoryCheckpoints::Versions() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> out;
  for (auto it = held_.rbegin(); it != held_.rend(); ++it) out.push_back(it->first);
  return out;
}

bool MemoryCheckpoints::Has(uint64_t version) const {
  absl::MutexLock lock(&mu_);
  return held_.count(version) > 0;
}

absl::StatusOr<CheckpointState> MemoryCheckpoints::Load(uint64_t version) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(version);
  if (it == held_.end()) return absl::NotFoundError(absl::StrCat("no checkpoint of version ", version, " in memory"));
  return it->second;
}

absl::Status MemoryCheckpoints::DropNewerThan(uint64_t version) const {
  absl::MutexLock lock(&mu_);
  held_.erase(held_.upper_bound(version), held_.end());
  return absl::OkStatus();
}

absl::StatusOr<std::string> MemoryCheckpoints::MoveAside(absl::Time) const {
  absl::MutexLock lock(&mu_);
  held_.clear();
  return std::string();
}

}  // namespace server
}  // namespace omnilearn
