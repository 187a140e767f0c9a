#include "server/checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "common/await_state.h"
#include "common/clock.h"
#include "common/safetensors.h"
#include "server/checkpoint/checkpointer.h"
#include "server/control/optimizer_mirror.h"
#include "server/control/parameter_server_core.h"

namespace omnilearn {
namespace server {
namespace {

std::string FreshDir(const std::string& name) {
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::system(("rm -rf '" + dir + "'").c_str());
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::shared_ptr<const std::vector<float>> Floats(std::vector<float> values) {
  return std::make_shared<const std::vector<float>>(std::move(values));
}

CheckpointState Sample(uint64_t version) {
  CheckpointState s;
  s.layout = *ModelLayout::Create({{"conv.weight", {2, 1, 2}}, {"bn.running_var", {2}, /*buffer=*/true}});
  s.weights = std::make_shared<const std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5, 6});
  s.optimizer_state = {{"momentum", Floats({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f})}};
  s.mode = "async";
  s.version = version;
  s.global_samples = 123456;
  s.rounds = 77;
  s.adjustments = 9;
  s.history = 0x0123456789abcdefULL;  // a leading zero digit: written as 16 digits
  controller::WorkerMemory m;
  m.batch = 40;
  m.guard_max = 64;
  m.history = {{40, 0.02, 12, 1e-6}, {32, 0.016, 30, 2e-6}};
  s.controller["gpu0"] = m;
  s.controller["cpu \"1\""] = controller::WorkerMemory{8, 0, {}};
  s.created = absl::FromUnixSeconds(1700000000);
  s.sampler = SamplerState{60000, 7, 2, 1234, {{1, 59999}, {2, 5}}};
  return s;
}

void RequireSame(const CheckpointState& a, const CheckpointState& b) {
  REQUIRE(a.layout == b.layout);  // buffer flags included
  REQUIRE(a.sampler.dataset_size == b.sampler.dataset_size);
  REQUIRE(a.sampler.seed == b.sampler.seed);
  REQUIRE(a.sampler.epoch == b.sampler.epoch);
  REQUIRE(a.sampler.cursor == b.sampler.cursor);
  REQUIRE(a.sampler.pending == b.sampler.pending);
  REQUIRE(*a.weights == *b.weights);
  REQUIRE(a.optimizer_state.size() == b.optimizer_state.size());
  for (size_t i = 0; i < a.optimizer_state.size(); ++i) {
    REQUIRE(a.optimizer_state[i].first == b.optimizer_state[i].first);
    REQUIRE(*a.optimizer_state[i].second == *b.optimizer_state[i].second);
  }
  REQUIRE(a.optimizer == b.optimizer);
  REQUIRE(a.mode == b.mode);
  REQUIRE(a.adam_time == b.adam_time);
  REQUIRE(a.history == b.history);
  REQUIRE(a.version == b.version);
  REQUIRE(a.global_samples == b.global_samples);
  REQUIRE(a.rounds == b.rounds);
  REQUIRE(a.adjustments == b.adjustments);
  REQUIRE(a.created == b.created);
  REQUIRE(a.sharded == b.sharded);
  REQUIRE(a.controller.size() == b.controller.size());
  for (const auto& [name, m] : a.controller) {
    const controller::WorkerMemory& n = b.controller.at(name);
    REQUIRE(m.batch == n.batch);
    REQUIRE(m.guard_max == n.guard_max);
    REQUIRE(m.history.size() == n.history.size());
    for (size_t i = 0; i < m.history.size(); ++i) {
      REQUIRE(m.history[i].batch == n.history[i].batch);
      REQUIRE(m.history[i].mean_seconds == n.history[i].mean_seconds);
      REQUIRE(m.history[i].samples == n.history[i].samples);
      REQUIRE(m.history[i].m2 == n.history[i].m2);
    }
  }
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE("a checkpoint round trip keeps every field", "[checkpoint]") {
  const std::string dir = FreshDir("roundtrip");
  const CheckpointState s = Sample(500);
  REQUIRE(WriteCheckpoint(dir + "/c.safetensors", s).ok());
  absl::StatusOr<CheckpointState> r = ReadCheckpoint(dir + "/c.safetensors");
  REQUIRE(r.ok());
  RequireSame(s, *r);
  // Open format: the model under its own names, the optimizer under a prefix.
  auto f = *ReadSafetensors(dir + "/c.safetensors");
  REQUIRE(f.Find("conv.weight") != nullptr);
  REQUIRE(f.Find("optimizer.momentum/bn.running_var") != nullptr);
  REQUIRE(f.metadata.at("format") == kCheckpointFormat);
  REQUIRE(f.metadata.at("omnilearn.history") == "0123456789abcdef");
}

TEST_CASE("a checkpoint's bytes in memory are its file's, and read back alike", "[checkpoint]") {
  const std::string dir = FreshDir("encoded");
  CheckpointState s = Sample(501);
  s.slice = 3;
  REQUIRE(WriteCheckpoint(dir + "/c.safetensors", s).ok());
  absl::StatusOr<std::string> bytes = EncodeCheckpoint(s);
  REQUIRE(bytes.ok());
  REQUIRE(*bytes == Slurp(dir + "/c.safetensors"));
  absl::StatusOr<CheckpointState> back = DecodeCheckpoint(*bytes);
  REQUIRE(back.ok());
  RequireSame(s, *back);
  REQUIRE(back->slice == 3);
  std::string torn = *bytes;
  torn[torn.size() - 1] ^= 1;
  REQUIRE(absl::IsDataLoss(DecodeCheckpoint(torn).status()));
  REQUIRE(!DecodeCheckpoint(bytes->substr(0, bytes->size() / 2)).ok());
}

TEST_CASE("a sharded job's coordinator keeps the whole model's layout and its cut", "[checkpoint]") {
  const std::string dir = FreshDir("sharded");
  CheckpointState s = Sample(8);
  REQUIRE(WriteCheckpoint(dir + "/one.safetensors", s).ok());
  REQUIRE_FALSE(ReadCheckpoint(dir + "/one.safetensors")->sharded.has_value());  // one server's
  s.sharded = ShardedJob{*ModelLayout::Create({{"fc.weight", {256, 784}}, {"bn.running_mean", {8}, true}}), 3, 1 << 18};
  REQUIRE(WriteCheckpoint(dir + "/c.safetensors", s).ok());
  absl::StatusOr<CheckpointState> r = ReadCheckpoint(dir + "/c.safetensors");
  REQUIRE(r.ok());
  RequireSame(s, *r);
  s.sharded->partition_bytes = 0;  // the automatic size (common/shard_map.h) is a cut of its own
  REQUIRE(WriteCheckpoint(dir + "/auto.safetensors", s).ok());
  r = ReadCheckpoint(dir + "/auto.safetensors");
  REQUIRE(r.ok());
  REQUIRE(r->sharded->partition_bytes == 0);
  REQUIRE_FALSE(r->sharded->whole_tensors);
  s.sharded->whole_tensors = true;  // a map that cuts no tensor (Adafactor, Lamb, Muon)
  REQUIRE(WriteCheckpoint(dir + "/whole.safetensors", s).ok());
  REQUIRE(ReadCheckpoint(dir + "/whole.safetensors")->sharded->whole_tensors);
  s.sharded->shards = 1;  // not a sharded job: a file that says so is not ours
  REQUIRE(WriteCheckpoint(dir + "/bad.safetensors", s).ok());
  absl::StatusOr<CheckpointState> bad = ReadCheckpoint(dir + "/bad.safetensors");
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  REQUIRE(absl::StrContains(bad.status().message(), "sharded job"));
}

// The model's own types: the export writes them, a checkpoint keeps float32 and names them.
TEST_CASE("an export writes each tensor in the model's type; a checkpoint keeps float32 and the types",
          "[checkpoint]") {
  const std::string dir = FreshDir("dtypes");
  CheckpointState s = Sample(9);
  s.layout = *ModelLayout::Create(
      {{"fc.weight", {2}}, {"steps", {}, /*buffer=*/true, "I64"}, {"flags", {2}, /*buffer=*/true, "BOOL"}});
  s.weights = std::make_shared<const std::vector<float>>(std::vector<float>{0.5f, -1.0f, 6.6f, 0.0f, 0.9f});
  s.optimizer_state.clear();
  REQUIRE(ExportModel(dir + "/m.safetensors", s.layout, *s.weights, 9).ok());
  absl::StatusOr<RawSafetensorsFile> raw = ReadRawSafetensors(dir + "/m.safetensors");
  REQUIRE(raw.ok());
  REQUIRE((raw->Find("steps")->dtype == "I64" && raw->Find("flags")->dtype == "BOOL"));
  int64_t steps = 0;
  memcpy(&steps, raw->data.data() + raw->Find("steps")->byte_offset, sizeof(steps));
  REQUIRE(steps == 7);  // an average of counts, rounded
  REQUIRE(raw->data.substr(raw->Find("flags")->byte_offset, 2) == std::string("\0\1", 2));
  REQUIRE(*ReadSafetensors(dir + "/m.safetensors")->Gather(s.layout) == std::vector<float>{0.5f, -1.0f, 7, 0, 1});

  REQUIRE(WriteCheckpoint(dir + "/c.safetensors", s).ok());
  REQUIRE(ReadRawSafetensors(dir + "/c.safetensors")->Find("steps")->dtype == "F32");  // the exact state
  absl::StatusOr<CheckpointState> r = ReadCheckpoint(dir + "/c.safetensors");
  REQUIRE(r.ok());
  REQUIRE(*r->weights == *s.weights);
  REQUIRE(r->layout.tensors()[1].dtype == "I64");
  REQUIRE(r->layout.tensors()[2].dtype == "BOOL");
  REQUIRE(r->layout.tensors()[0].dtype == "F32");

  s.sharded = ShardedJob{s.layout, 2, 1 << 18};  // a coordinator keeps them in the job's layout too
  REQUIRE(WriteCheckpoint(dir + "/s.safetensors", s).ok());
  r = ReadCheckpoint(dir + "/s.safetensors");
  REQUIRE(r.ok());
  REQUIRE(r->sharded->layout.tensors()[1].dtype == "I64");
}

TEST_CASE("an export is not taken for a checkpoint", "[checkpoint]") {
  const std::string dir = FreshDir("export");
  const CheckpointState s = Sample(3);
  REQUIRE(ExportModel(dir + "/m.safetensors", s.layout, *s.weights, 3).ok());
  auto f = ReadSafetensors(dir + "/m.safetensors");
  REQUIRE(f.ok());
  REQUIRE(f->tensors.size() == 2);  // weights alone
  REQUIRE(*f->Gather(s.layout) == *s.weights);
  REQUIRE(ReadCheckpoint(dir + "/m.safetensors").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the directory keeps the newest K and skips a corrupt newest one", "[checkpoint]") {
  const std::string dir = FreshDir("keep") + "/shard-1/checkpoints";  // parents made too
  CheckpointDir d(dir, 3);
  REQUIRE(d.Prepare().ok());
  for (uint64_t v : {10, 20, 30, 40, 50}) REQUIRE(d.Write(Sample(v)).ok());
  std::vector<std::string> all = d.List();
  REQUIRE(all.size() == 3);
  REQUIRE(all[0] == dir + "/ckpt-000000000050.safetensors");
  REQUIRE(all[2] == dir + "/ckpt-000000000030.safetensors");

  // Truncate the newest: it is reported and skipped for the one before.
  const std::string newest = Slurp(all[0]);
  std::ofstream(all[0], std::ios::binary | std::ios::trunc) << newest.substr(0, newest.size() / 2);
  std::vector<std::string> warnings;
  auto loaded = d.LoadNewest([&](const std::string& w) { warnings.push_back(w); });
  REQUIRE(loaded.ok());
  REQUIRE(loaded->has_value());
  REQUIRE((*loaded)->second.version == 40);
  REQUIRE(warnings.size() == 1);
  REQUIRE(warnings[0].find("ckpt-000000000050") != std::string::npos);

  // Corrupt the next one's data: checksum, skipped too.
  std::string second = Slurp(all[1]);
  second[second.size() - 2] ^= 1;
  std::ofstream(all[1], std::ios::binary | std::ios::trunc) << second;
  loaded = d.LoadNewest([&](const std::string& w) { warnings.push_back(w); });
  REQUIRE((*loaded)->second.version == 30);
  REQUIRE(warnings.size() == 3);
}

TEST_CASE("the directory's versions, one loaded by version, and the newer ones dropped", "[checkpoint]") {
  const std::string dir = FreshDir("versions");
  CheckpointDir d(dir, 5);
  REQUIRE(d.Prepare().ok());
  REQUIRE(d.Versions().empty());
  for (uint64_t v : {7, 9, 12}) REQUIRE(d.Write(Sample(v)).ok());
  REQUIRE(d.Versions() == std::vector<uint64_t>{12, 9, 7});
  absl::StatusOr<CheckpointState> nine = d.Load(9);
  REQUIRE(nine.ok());
  RequireSame(*nine, Sample(9));
  REQUIRE(absl::IsNotFound(d.Load(8).status()));
  REQUIRE(d.DropNewerThan(9).ok());
  REQUIRE(d.Versions() == std::vector<uint64_t>{9, 7});
  REQUIRE(d.DropNewerThan(9).ok());  // nothing newer: nothing to do
  REQUIRE(d.Versions() == std::vector<uint64_t>{9, 7});
}

TEST_CASE("memory keeps the newest K states themselves; a shard's slice index round-trips on disk", "[checkpoint]") {
  MemoryCheckpoints m(2);
  REQUIRE(m.Versions().empty());
  CheckpointState seven = Sample(7);
  REQUIRE(*m.Write(seven) == "");  // no path: nothing is logged as written
  for (uint64_t v : {9, 12}) REQUIRE(m.Write(Sample(v)).ok());
  REQUIRE(m.Versions() == std::vector<uint64_t>{12, 9});
  REQUIRE_FALSE(m.Has(7));
  REQUIRE(absl::IsNotFound(m.Load(7).status()));
  CheckpointState kept = Sample(13);
  REQUIRE(m.Write(kept).ok());
  REQUIRE(m.Load(13)->weights == kept.weights);  // the same buffer, not a copy
  REQUIRE(m.DropNewerThan(12).ok());
  REQUIRE(m.Versions() == std::vector<uint64_t>{12});
  RequireSame(*m.Load(12), Sample(12));
  REQUIRE(*m.MoveAside(absl::Now()) == "");
  REQUIRE(m.Versions().empty());
  REQUIRE(m.where() == "memory");

  CheckpointDir d(FreshDir("slice"), 2);
  REQUIRE(d.Prepare().ok());
  CheckpointState shard = Sample(3);
  shard.slice = 2;
  REQUIRE(d.Write(shard).ok());
  REQUIRE(d.Load(3)->slice == 2);
  REQUIRE(d.Write(Sample(4)).ok());
  REQUIRE(d.Load(4)->slice == 0);
}

TEST_CASE("a crash mid-write leaves only a partial file that is ignored and cleaned", "[checkpoint]") {
  const std::string dir = FreshDir("partial");
  CheckpointDir d(dir, 3);
  REQUIRE(d.Write(Sample(10)).ok());
  std::ofstream(dir + "/ckpt-000000000020.safetensors.123.partial") << "half a file";
  REQUIRE(d.List().size() == 1);
  auto loaded = d.LoadNewest([](const std::string&) { FAIL("nothing to skip"); });
  REQUIRE((*loaded)->second.version == 10);
  REQUIRE(d.Prepare().ok());
  REQUIRE(access((dir + "/ckpt-000000000020.safetensors.123.partial").c_str(), F_OK) != 0);
}

TEST_CASE("one server a directory: a second is refused, naming the holder, until the first lets go", "[checkpoint]") {
  const std::string dir = FreshDir("locked");
  std::ofstream(dir + "/ckpt-000000000020.safetensors.9.partial") << "the first server's write in progress";
  auto first = std::make_unique<CheckpointDir>(dir, 3);
  REQUIRE(first->Prepare().ok());
  std::ofstream(dir + "/ckpt-000000000030.safetensors.9.partial") << "the first server's write in progress";
  const CheckpointDir copy = *first;  // the checkpointer's copy shares the lock
  CheckpointDir second(dir, 3);
  const absl::Status refused = second.Prepare();
  REQUIRE(absl::IsFailedPrecondition(refused));
  REQUIRE(absl::StrContains(refused.message(), absl::StrCat("pid ", getpid())));
  // The refused server touched nothing: the first one's partial file is still there.
  REQUIRE(access((dir + "/ckpt-000000000030.safetensors.9.partial").c_str(), F_OK) == 0);
  REQUIRE(copy.Versions().empty());  // the LOCK file is no checkpoint
  first.reset();
  REQUIRE(absl::IsFailedPrecondition(second.Prepare()));  // the copy still holds it
}

TEST_CASE("a directory is free again once its holder is gone", "[checkpoint]") {
  const std::string dir = FreshDir("relocked");
  { REQUIRE(CheckpointDir(dir, 3).Prepare().ok()); }
  REQUIRE(CheckpointDir(dir, 3).Prepare().ok());
}

TEST_CASE("--fresh moves old checkpoints aside, deleting nothing", "[checkpoint]") {
  const std::string dir = FreshDir("fresh");
  CheckpointDir d(dir, 3);
  REQUIRE(d.Write(Sample(10)).ok());
  REQUIRE(d.Write(Sample(20)).ok());
  absl::StatusOr<std::string> aside = d.MoveAside(absl::FromUnixSeconds(1234));
  REQUIRE(aside.ok());
  REQUIRE(*aside == dir + "/aside-1234");
  REQUIRE(d.List().empty());
  REQUIRE(CheckpointDir(*aside, 3).List().size() == 2);
  REQUIRE(d.MoveAside(absl::FromUnixSeconds(1235))->empty());  // nothing left to move
}

// ---------------------------------------------------------------- with a core

constexpr int kParams = 6;

ServerOptions CoreOptions(Mode mode, const Clock* clock) {
  ServerOptions o;
  o.mode = mode;
  o.num_workers = 1;
  o.clock = clock;
  o.lease = absl::Hours(1);
  o.controller.global_batch = 8;
  o.optimizer.learning_rate = 0.5;
  o.optimizer.momentum = 0.9;
  o.optimizer.weight_decay = 0;
  return o;
}

JoinInfo Joiner(const std::string& name, bool with_params) {
  JoinInfo j;
  j.name = name;
  j.layout = *ModelLayout::Create({{"w", {2, 2}}, {"b", {2}}});
  if (with_params) j.initial_parameters = std::vector<float>(kParams, 1.0f);
  return j;
}

PushInfo Grad(WorkerId id, int64_t batch, uint64_t version) {
  PushInfo p;
  p.id = id;
  p.batch = batch;
  p.compute_seconds = 0.01 * batch;
  p.version = version;
  return p;
}

TEST_CASE("a restored core continues exactly where the captured one was", "[checkpoint][core]") {
  FakeClock clock;
  auto a = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));
  const JoinResult j = *a->Join(Joiner("w0", true), clock.Now() + absl::Seconds(5));
  for (int i = 0; i < 5; ++i) {
    REQUIRE(a->Push(Grad(j.id, 8, i), std::vector<float>(kParams, 0.1f * (i + 1)), clock.Now()).ok());
  }
  absl::StatusOr<CheckpointState> captured = a->Capture();
  REQUIRE(captured.ok());
  REQUIRE(captured->version == 5);
  REQUIRE(captured->global_samples == 40);
  REQUIRE(captured->controller.count("w0") == 1);
  REQUIRE(captured->history != 0);  // five steps' members
  const std::string dir = FreshDir("restore");
  REQUIRE(WriteCheckpoint(dir + "/c.safetensors", *captured).ok());
  const CheckpointState read = *ReadCheckpoint(dir + "/c.safetensors");

  auto b = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));
  REQUIRE(b->Restore(read).ok());
  const JoinResult k = *b->Join(Joiner("w0", false), clock.Now() + absl::Seconds(5));
  REQUIRE(b->version() == 5);
  REQUIRE(k.global_samples == 40);
  // The same push on both: same weights after it (momentum restored too).
  const std::vector<float> g(kParams, 0.7f);
  REQUIRE(a->Push(Grad(j.id, 8, 5), g, clock.Now()).ok());
  REQUIRE(b->Push(Grad(k.id, 8, 5), g, clock.Now()).ok());
  REQUIRE(*a->Pull(j.id, 0)->weights == *b->Pull(k.id, 0)->weights);
  // The same steps: the same history (worker ids are the servers' own, both 1 here).
  REQUIRE(j.id == k.id);
  REQUIRE(a->Pull(j.id, 0)->history == b->Pull(k.id, 0)->history);
  REQUIRE(b->Pull(k.id, 0)->history != read.history);
  REQUIRE(b->Snapshot().global_samples == 48);
}

TEST_CASE("a restarted server runs on with the worker's optimizer, its state, scalars and rates",
          "[checkpoint][core]") {
  FakeClock clock;
  WantedOptimizer nadam;  // NAdam keeps a scalar per group (mu_product); two groups, a scheduler's rates
  nadam.kind = OptimizerKind::kNAdam;
  nadam.lr = 0.01;
  nadam.hyper = {{"beta1", 0.9}, {"beta2", 0.99}, {"momentum_decay", 0.004}, {"decoupled_weight_decay", 1}};
  nadam.groups = {{{"w"}, 0.01, 0.1, {}}, {{"b"}, 0.02, 0, {{"beta1", 0.8}}}};
  JoinInfo first = Joiner("w0", true);
  first.optimizer = nadam;
  auto a = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));  // its flags: SGD
  const JoinResult j = *a->Join(first, clock.Now() + absl::Seconds(5));
  for (int i = 0; i < 4; ++i) {
    PushInfo p = Grad(j.id, 8, i);
    if (i == 2) p.group_lr = {0.005, 0.01};
    REQUIRE(a->Push(p, std::vector<float>(kParams, 0.1f * (i + 1)), clock.Now()).ok());
  }
  const std::string dir = FreshDir("restore_optimizer");
  REQUIRE(WriteCheckpoint(dir + "/c.safetensors", *a->Capture()).ok());
  const CheckpointState read = *ReadCheckpoint(dir + "/c.safetensors");
  REQUIRE(read.optimizer == "nadam");
  REQUIRE(read.optimizer_from == "w0");
  REQUIRE(read.group_rates == std::vector<double>{0.005, 0.01});
  REQUIRE(read.optimizer_scalars.at("mu_product").size() == 2);

  auto b = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));
  REQUIRE(b->Restore(read).ok());
  JoinInfo again = Joiner("w0", false);
  again.optimizer = nadam;  // the same program's: accepted, the job's
  const JoinResult k = *b->Join(again, clock.Now() + absl::Seconds(5));
  JoinInfo other = Joiner("w1", false);
  other.optimizer = nadam;
  other.optimizer->kind = OptimizerKind::kRAdam;
  other.optimizer->hyper.erase("momentum_decay");
  REQUIRE(absl::StrContains(b->Join(other, clock.Now() + absl::Seconds(5)).status().message(),
                            "(from w0, whose model the job took)"));
  const std::vector<float> g(kParams, 0.7f);
  REQUIRE(a->Push(Grad(j.id, 8, 4), g, clock.Now()).ok());
  REQUIRE(b->Push(Grad(k.id, 8, 4), g, clock.Now()).ok());
  REQUIRE(*a->Pull(j.id, 0)->weights == *b->Pull(k.id, 0)->weights);
}

TEST_CASE("a restored core hands out first the samples that were assigned but not trained", "[checkpoint][core]") {
  FakeClock clock;
  ServerOptions o = CoreOptions(Mode::kAsync, &clock);
  o.optimizer.kind = OptimizerKind::kAdam;  // its state (two buffers) goes through the file too
  auto a = *ParameterServerCore::Create(o);
  JoinInfo info = Joiner("w0", true);
  info.dataset_size = 100;
  const JoinResult j = *a->Join(info, clock.Now() + absl::Seconds(5));
  const PushResult r = *a->Push(Grad(j.id, 8, 0), std::vector<float>(kParams, 0.1f), clock.Now());
  const CheckpointState captured = *a->Capture();  // r.samples: assigned, not trained
  REQUIRE(captured.optimizer == "adam");
  const std::string dir = FreshDir("samples");
  REQUIRE(WriteCheckpoint(dir + "/c.safetensors", captured).ok());
  auto b = *ParameterServerCore::Create(o);
  REQUIRE(b->Restore(*ReadCheckpoint(dir + "/c.safetensors")).ok());
  info.initial_parameters.reset();
  const JoinResult k = *b->Join(info, clock.Now() + absl::Seconds(5));
  REQUIRE(k.samples == r.samples);
  REQUIRE(b->Snapshot().dataset_size == 100);
  // And an SGD server does not take an Adam checkpoint.
  auto sgd = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));
  absl::Status refused = sgd->Restore(captured);
  REQUIRE(refused.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(absl::StrContains(refused.message(), "--optimizer"));
}

TEST_CASE("restoring refuses another mode, a second time, and a joined server", "[checkpoint][core]") {
  FakeClock clock;
  CheckpointState s;
  s.layout = *ModelLayout::Create({{"w", {2, 2}}, {"b", {2}}});
  s.weights = std::make_shared<const std::vector<float>>(kParams, 0.0f);
  s.optimizer_state = {{"momentum", Floats(std::vector<float>(kParams, 0.0f))}};
  s.mode = "async";
  s.version = 9;
  auto sync = *ParameterServerCore::Create(CoreOptions(Mode::kSync, &clock));
  absl::Status st = sync->Restore(s);
  REQUIRE(st.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(st.message().find("mode async") != absl::string_view::npos);
  auto async = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));
  REQUIRE(async->Restore(s).ok());
  REQUIRE(async->Restore(s).code() == absl::StatusCode::kFailedPrecondition);
  // A worker with another model is refused with the server's layout in the message.
  JoinInfo other = Joiner("w0", true);
  other.layout = *ModelLayout::Create({{"w", {3}}});
  other.initial_parameters = std::vector<float>(3, 0.0f);
  absl::Status join = async->Join(other, clock.Now() + absl::Seconds(1)).status();
  REQUIRE(join.code() == absl::StatusCode::kInvalidArgument);
  CAPTURE(join.message());
  REQUIRE(join.message().find("'w' is [3] here, [2,2] on the server") != absl::string_view::npos);
  REQUIRE(join.message().find("'b' [2] is missing here") != absl::string_view::npos);
  CheckpointState bad = s;
  bad.optimizer_state = {};
  REQUIRE(ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock)).value()->Restore(bad).code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a restored server gives returning workers their batches at once", "[checkpoint][core]") {
  FakeClock clock;
  ServerOptions o = CoreOptions(Mode::kAsync, &clock);
  o.num_workers = 2;
  o.controller.global_batch = 200;
  o.adjust_every = 1;
  auto a = *ParameterServerCore::Create(o);
  JoinResult fast, slow;
  std::thread t([&] { fast = *a->Join(Joiner("fast", true), clock.Now() + absl::Seconds(30)); });
  REQUIRE(AwaitState([&] { return a->Snapshot().parameter_count > 0; }));
  slow = *a->Join(Joiner("slow", false), clock.Now() + absl::Seconds(30));
  t.join();
  for (int i = 0; i < 40; ++i) {
    for (auto [id, per_sample] : {std::pair<WorkerId, double>{fast.id, 0.001}, {slow.id, 0.003}}) {
      PushInfo p = Grad(id, 0, a->version());
      p.batch = a->Snapshot().workers[id == fast.id ? 0 : 1].batch;
      p.compute_seconds = per_sample * p.batch;
      REQUIRE(a->Push(p, std::vector<float>(kParams, 0.0f), clock.Now()).ok());
    }
  }
  const ServerSnapshot before = a->Snapshot();
  REQUIRE(before.workers[0].batch == 150);
  REQUIRE(before.workers[1].batch == 50);

  auto b = *ParameterServerCore::Create(o);
  REQUIRE(b->Restore(*a->Capture()).ok());
  JoinResult fast2, slow2;
  std::thread u([&] { fast2 = *b->Join(Joiner("fast", false), clock.Now() + absl::Seconds(30)); });
  slow2 = *b->Join(Joiner("slow", false), clock.Now() + absl::Seconds(30));
  u.join();
  REQUIRE(b->Snapshot().workers.size() == 2);
  for (const WorkerSnapshot& w : b->Snapshot().workers) {
    CAPTURE(w.name);
    REQUIRE(w.batch == (w.name == "fast" ? 150 : 50));
  }
}

TEST_CASE("the checkpointer writes on its clock's interval, only when the model moved", "[checkpoint][clock]") {
  FakeClock clock;
  auto core = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));
  const std::string dir = FreshDir("timer");
  Checkpointer cp(core.get(), std::make_unique<CheckpointDir>(dir, 2), absl::Seconds(60));
  REQUIRE(cp.MaybeCheckpoint()->empty());  // no model yet
  const JoinResult j = *core->Join(Joiner("w0", true), clock.Now() + absl::Seconds(5));
  REQUIRE(core->Push(Grad(j.id, 8, 0), std::vector<float>(kParams, 0.5f), clock.Now()).ok());
  clock.Advance(absl::Seconds(59));
  REQUIRE(cp.MaybeCheckpoint()->empty());  // not due
  clock.Advance(absl::Seconds(1));
  absl::StatusOr<std::string> path = cp.MaybeCheckpoint();
  REQUIRE(path.ok());
  REQUIRE(*path == dir + "/ckpt-000000000001.safetensors");
  clock.Advance(absl::Seconds(120));
  REQUIRE(cp.MaybeCheckpoint()->empty());  // due, but the model did not move
  REQUIRE(core->Push(Grad(j.id, 8, 1), std::vector<float>(kParams, 0.5f), clock.Now()).ok());
  REQUIRE(cp.CheckpointNow()->find("ckpt-000000000002") != std::string::npos);
  REQUIRE(ReadCheckpoint(dir + "/ckpt-000000000002.safetensors")->version == 2);
  // A sharded job's rollback dropped it (its history was undone): the same version is
  // written again.
  REQUIRE(CheckpointDir(dir, 2).DropNewerThan(1).ok());
  REQUIRE(cp.CheckpointNow()->find("ckpt-000000000002") != std::string::npos);
}

TEST_CASE("a sharded job's recovery goes back to the newest checkpoint every server holds", "[checkpoint][clock]") {
  FakeClock clock;
  auto core = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));
  const std::string dir = FreshDir("goback");
  Checkpointer cp(core.get(), std::make_unique<CheckpointDir>(dir, 5), absl::Seconds(60));
  const JoinResult j = *core->Join(Joiner("w0", true), clock.Now() + absl::Seconds(5));
  for (uint64_t v = 0; v < 3; ++v) {
    REQUIRE(core->Push(Grad(j.id, 8, v), std::vector<float>(kParams, 0.5f), clock.Now()).ok());
    REQUIRE(cp.CheckpointNow().ok());  // versions 1, 2, 3
  }
  absl::StatusOr<uint64_t> none = cp.GoBack({{}, {5, 4}, {3}});
  REQUIRE(absl::IsFailedPrecondition(none.status()));
  REQUIRE(absl::StrContains(none.status().message(), "the coordinator holds [3, 2, 1], shard 1 [5, 4], shard 2 [3]"));
  REQUIRE(core->version() == 3);  // nothing changed
  absl::StatusOr<uint64_t> back = cp.GoBack({{}, {4, 2, 1}, {3, 2}});
  REQUIRE(back.ok());
  REQUIRE(*back == 2);
  REQUIRE(core->version() == 2);
  REQUIRE(CheckpointDir(dir, 5).Versions() == std::vector<uint64_t>{2, 1});  // 3's history was undone
}

TEST_CASE("the checkpointer adds what its caller knows of the job", "[checkpoint][clock]") {
  FakeClock clock;
  auto core = *ParameterServerCore::Create(CoreOptions(Mode::kAsync, &clock));
  const std::string dir = FreshDir("annotated");
  const ShardedJob job{*ModelLayout::Create({{"w", {4096}}}), 2, 4096};
  Checkpointer cp(core.get(), std::make_unique<CheckpointDir>(dir, 2), absl::Seconds(60),
                  [&job](CheckpointState* s) { s->sharded = job; });
  const JoinResult j = *core->Join(Joiner("w0", true), clock.Now() + absl::Seconds(5));
  REQUIRE(core->Push(Grad(j.id, 8, 0), std::vector<float>(kParams, 0.5f), clock.Now()).ok());
  REQUIRE(cp.CheckpointNow().ok());
  REQUIRE(ReadCheckpoint(dir + "/ckpt-000000000001.safetensors")->sharded == job);
}

}  // namespace
}  // namespace server
}  // namespace omnilearn
