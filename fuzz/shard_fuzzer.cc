// The shard plane's handlers, both ends, driven by a sequence of hostile operations: the
// coordinator's registrations (ShardHello with any fields), its queues (sessions, steps,
// checkpoints, the model's adoption) drained into a shard's command applier, commands with
// any fields applied straight to the shard, and pushes and pulls of the shard's data plane
// with any ids, versions, batch sizes and gradient lengths. Whatever the input: no crash,
// no leak, no undefined behaviour, no deadlock; a refused registration takes no slice and
// a refused command leaves the slice's version where it was.
#include <cstring>
#include <numeric>
#include <variant>
#include <vector>

#include "common/tensor_codec.h"
#include "fuzz/fuzz_input.h"
#include "server/control/coordinator_shards.h"
#include "server/data/shard_core.h"
#include "server/rpc/shard_apply.h"
#include "server/rpc/shard_wire.h"

namespace {

using omnilearn::fuzz::FuzzInput;
namespace v1 = omnilearn::v1;
namespace server = omnilearn::server;

constexpr int kShards = 3;
constexpr int64_t kPartition = 64;  // 16 floats: the model's 64 floats make 4 partitions

omnilearn::ModelLayout Model() { return *omnilearn::ModelLayout::Create({{"a", {32}}, {"b", {32}}}); }

class Harness {
 public:
  Harness()
      : coordinator_(Options()),
        shard_({omnilearn::Clock::Real(), nullptr}),
        applier_({kShards, kPartition, /*index=*/0, /*checkpoint_dir=*/"", 3, nullptr}, &shard_) {
    coordinator_.SetRecover([this](const std::vector<std::vector<uint64_t>>& held) -> absl::StatusOr<uint64_t> {
      if (held.size() != kShards) __builtin_trap();  // one list per slice
      if (!recover_ok_) return absl::FailedPreconditionError("no common checkpoint");
      return uint64_t{0};
    });
  }

  void Op(FuzzInput& in) {
    const uint8_t kind = in.Byte();
    switch (kind % 8) {
      case 0:
        return Register(in, kind & 0x80);
      case 1:
        if (!registered_.empty()) coordinator_.Disconnect(registered_[in.Byte() % registered_.size()]);
        return;
      case 2:
        return Drain(in);
      case 3:
        return Adopt();
      case 4:
        return Hook(in);
      case 5:
        return Apply(in);
      case 6:
        return Push(in);
      default:
        (void)shard_.Pull(in.Byte(), in.Byte(), in.Byte(), absl::InfinitePast());
    }
  }

 private:
  static server::CoordinatorShardsOptions Options() {
    server::CoordinatorShardsOptions o;
    o.shards = kShards;
    o.partition_bytes = kPartition;
    o.address = "coordinator:1";
    o.member_wait = absl::Milliseconds(5);
    return o;
  }

  // `valid_shape`: the job's shard count and partitions over whatever was parsed, so the
  // registration reaches the slice rules.
  void Register(FuzzInput& in, bool valid_shape) {
    v1::ShardHello hello;
    if (!hello.ParseFromString(in.Bytes())) return;
    if (valid_shape) {
      hello.set_shards(kShards);
      hello.set_partition_bytes(kPartition);
      if (hello.address().empty()) hello.set_address("shard:1");
    }
    recover_ok_ = in.Byte() & 1;
    const int before = coordinator_.registered();
    absl::StatusOr<int> index = coordinator_.Register(server::RegistrationFromProto(hello));
    if (!index.ok()) {
      if (absl::IsInvalidArgument(index.status()) && coordinator_.registered() != before) __builtin_trap();
      return;
    }
    if (*index < 1 || *index >= kShards) __builtin_trap();  // a slice the job has
    registered_.push_back(*index);
  }

  // The coordinator's queue for a registered slice, into the shard's applier as the
  // Shard call sends it (an init's values in the slice layout's chunks).
  void Drain(FuzzInput& in) {
    if (registered_.empty()) return;
    const int index = registered_[in.Byte() % registered_.size()];
    const uint64_t generation = coordinator_.generation(index);
    server::CoordinatorShards::Outgoing out;
    for (int n = 0; n < 64 && coordinator_.Next(index, generation, &out, absl::InfinitePast()).ok(); ++n) {
      if (std::holds_alternative<std::monostate>(out.command)) return;
      if (!applier_.Apply(server::CommandToProto(out.command)).ok()) return;
      if (out.values == nullptr) continue;
      const omnilearn::ModelLayout slice = coordinator_.SliceLayout(index);
      omnilearn::ForEachChunk(slice, out.values->data(), 40, [&](v1::TensorChunk& chunk) {
        v1::ShardCommand c;
        *c.mutable_chunk() = chunk;
        return applier_.Apply(c).ok();
      });
    }
  }

  void Adopt() {
    if (adopted_) return;
    adopted_ = true;
    auto values = std::make_shared<std::vector<float>>(Model().total_elements());
    std::iota(values->begin(), values->end(), 0.0f);
    absl::StatusOr<omnilearn::ShardMap> map = coordinator_.PlanFor(Model());
    if (!map.ok()) __builtin_trap();
    coordinator_.StashInitial("w0", Model(), *std::move(map), values);
    coordinator_.Hooks().model_adopted("w0");
  }

  void Hook(FuzzInput& in) {
    server::Replication hooks = coordinator_.Hooks();
    switch (in.Byte() % 4) {
      case 0:
        return hooks.session_opened(in.Byte(), in.Bytes());
      case 1:
        return hooks.session_closed(in.Byte());
      case 2: {
        // As the core calls it: a step only once a model was adopted (stepping needs one).
        v1::ShardStep step;
        if (step.ParseFromString(in.Bytes()) && adopted_) hooks.step(server::StepFromProto(step));
        return;
      }
      default: {
        const uint64_t version = in.U16();
        return hooks.checkpoint(version, in.U16());  // any history: a shard's check refuses the others
      }
    }
  }

  // A command with any fields, straight into the shard. A member wait within range is
  // kept short, so that a step waiting for members that never push ends at once.
  void Apply(FuzzInput& in) {
    v1::ShardCommand c;
    if (!c.ParseFromString(in.Bytes())) return;
    if (c.has_init()) {
      v1::ShardOptimizer* o = c.mutable_init()->mutable_optimizer();
      if (o->round_timeout_seconds() > 0.005 && o->round_timeout_seconds() <= 86400)
        o->set_round_timeout_seconds(0.005);
    }
    if (c.has_step() && in.Byte() & 1) c.mutable_step()->set_version(shard_.version());  // reach the sum
    const uint64_t before = shard_.version();
    const bool initialized = shard_.initialized();
    if (!applier_.Apply(c).ok() && shard_.initialized() == initialized && shard_.version() != before) {
      __builtin_trap();  // a refused command moved the slice
    }
  }

  void Push(FuzzInput& in) {
    server::PushInfo info;
    info.id = in.Byte();
    info.batch = static_cast<int8_t>(in.Byte());
    info.version = in.Byte();
    const uint8_t flags = in.Byte();
    info.report_only = flags & 1;
    info.out_of_memory = flags & 2;
    const std::string bytes = in.Bytes();
    std::vector<float> gradient(bytes.size() / sizeof(float));
    if (!gradient.empty()) std::memcpy(gradient.data(), bytes.data(), gradient.size() * sizeof(float));
    (void)shard_.Push(info, std::move(gradient), absl::InfinitePast());
  }

  server::CoordinatorShards coordinator_;
  server::ShardCore shard_;
  server::ShardApplier applier_;
  std::vector<int> registered_;
  bool adopted_ = false;
  bool recover_ok_ = true;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  Harness harness;
  for (int op = 0; op < 24 && !in.empty(); ++op) harness.Op(in);
  return 0;
}
