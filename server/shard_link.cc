#include "server/shard_link.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/shard_map.h"
#include "common/tensor_codec.h"
#include "proto/omnilearn.grpc.pb.h"
#include "server/parameter_store.h"

namespace omnilearn {
namespace server {

void ShardLink::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

absl::Status ShardLink::Run() {
  const absl::Time give_up = absl::Now() + options_.start_timeout;
  while (true) {
    bool registered = false;
    absl::Status s = RunOnce(&registered);
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return absl::OkStatus();
    }
    if (registered || !absl::IsUnavailable(s)) return s;
    if (absl::Now() >= give_up) {
      return absl::UnavailableError(absl::StrCat("the coordinator ", options_.coordinator, " did not answer in ",
                                                 absl::FormatDuration(options_.start_timeout), ": ", s.message()));
    }
    absl::SleepFor(absl::Seconds(1));
  }
}

absl::Status ShardLink::RunOnce(bool* registered) {
  auto stub = v1::ParameterServer::NewStub(grpc::CreateChannel(options_.coordinator, options_.credentials));
  grpc::ClientContext ctx;
  if (!options_.auth_token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.auth_token);
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return absl::OkStatus();
    context_ = &ctx;
  }
  v1::ShardHello hello;
  hello.set_address(options_.address);
  hello.set_shards(static_cast<uint32_t>(options_.shards));
  hello.set_partition_bytes(options_.partition_bytes);
  hello.set_index(static_cast<uint32_t>(options_.index));
  std::unique_ptr<grpc::ClientReader<v1::ShardCommand>> reader = stub->Shard(&ctx, hello);
  v1::ShardCommand c;
  absl::Status applied;
  while (applied.ok() && reader->Read(&c)) {
    *registered = true;
    switch (c.kind_case()) {
      case v1::ShardCommand::kInit:
        applied = ApplyInit(c.init(), reader.get());
        break;
      case v1::ShardCommand::kSession:
        if (c.session().closed()) {
          shard_->CloseSession(c.session().worker_id());
        } else {
          shard_->OpenSession(c.session().worker_id(), c.session().session_secret());
        }
        break;
      case v1::ShardCommand::kStep: {
        ReplicatedStep step;
        step.version = c.step().version();
        for (const auto& m : c.step().members()) step.members.push_back({m.worker_id(), m.model_version(), m.weight()});
        step.update_scale = c.step().update_scale();
        step.learning_rate = c.step().learning_rate();
        step.buffer_blend = c.step().buffer_blend();
        step.momentum = c.step().momentum();
        applied = shard_->Step(step);
        break;
      }
      default:
        applied = absl::InvalidArgumentError("an unknown command from the coordinator (a newer release?)");
    }
  }
  if (!applied.ok()) ctx.TryCancel();
  grpc::Status finished = reader->Finish();
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }
  if (!applied.ok()) return applied;
  if (*registered && finished.ok()) return absl::OkStatus();  // the coordinator's job ended
  if (*registered) {
    return absl::UnavailableError(absl::StrCat("the coordinator ", options_.coordinator, " ended the link: ",
                                               finished.error_message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(finished.error_code()), finished.error_message());
}

absl::Status ShardLink::ApplyInit(const v1::ShardInit& init, grpc::ClientReader<v1::ShardCommand>* reader) {
  absl::StatusOr<ModelLayout> layout = ParseLayout(init.layout());
  if (!layout.ok()) return layout.status();
  absl::StatusOr<ShardMap> map = ShardMap::Plan(*layout, options_.shards, options_.partition_bytes);
  if (!map.ok()) return map.status();
  const int index = static_cast<int>(init.index());
  if (map->fingerprint() != init.fingerprint() || index < 1 || index >= map->shards()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this shard's map of the model (%s, fingerprint %016x) is not the coordinator's (fingerprint %016x, slice "
        "%d): the shard and the coordinator are of different releases",
        map->DebugString(), map->fingerprint(), init.fingerprint(), index));
  }
  const ModelLayout& slice = map->slice_layout(index);
  ChunkAssembler assembler(&slice);
  v1::ShardCommand c;
  while (!assembler.CheckComplete().ok() && reader->Read(&c)) {
    if (!c.has_chunk()) return absl::InvalidArgumentError("the slice's values ended before they were complete");
    if (absl::Status s = assembler.Add(c.chunk()); !s.ok()) return s;
  }
  absl::StatusOr<std::vector<float>> values = assembler.Finish();
  if (!values.ok()) return values.status();
  absl::StatusOr<OptimizerKind> kind = ParseOptimizer(init.optimizer().kind());
  if (!kind.ok()) return kind.status();
  OptimizerOptions o;
  o.kind = *kind;
  o.momentum = init.optimizer().momentum();
  o.weight_decay = init.optimizer().weight_decay();
  o.beta1 = init.optimizer().beta1();
  o.beta2 = init.optimizer().beta2();
  o.eps = init.optimizer().eps();
  if (absl::Status s = shard_->Init(slice, *std::move(values), init.version(), o,
                                    absl::Seconds(init.optimizer().round_timeout_seconds()), init.sync());
      !s.ok()) {
    return s;
  }
  if (options_.log) options_.log(absl::StrCat("holding slice ", index, " of ", map->DebugString()));
  return absl::OkStatus();
}

}  // namespace server
}  // namespace omnilearn
