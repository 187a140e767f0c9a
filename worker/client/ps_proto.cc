#include "worker/client/ps_proto.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/tensor_codec.h"

namespace omnilearn {
namespace worker {

Action ActionOf(v1::Action a) {
  switch (a) {
    case v1::ACTION_STOP:
      return Action::kStop;
    case v1::ACTION_REJOIN:
      return Action::kRejoin;
    default:  // CONTINUE, and the deprecated PULL an older server may send: the same
      return Action::kContinue;
  }
}

std::optional<Mode> ModeOf(v1::Mode m) {
  switch (m) {
    case v1::MODE_SYNC:
      return Mode::kSync;
    case v1::MODE_ASYNC:
      return Mode::kAsync;
    case v1::MODE_SSP:
      return Mode::kSsp;
    default:
      return std::nullopt;
  }
}

Assignment AssignmentOf(const google::protobuf::RepeatedPtrField<v1::SampleSpan>& spans) {
  Assignment out;
  out.reserve(spans.size());
  for (const v1::SampleSpan& s : spans) out.push_back(SampleSpan{s.epoch(), {s.ids().begin(), s.ids().end()}});
  return out;
}

namespace {

v1::OptimizerSpec OptimizerSpecOf(const OptimizerChoice& o) {
  v1::OptimizerSpec p;
  v1::OptimizerKind kind = v1::OPTIMIZER_KIND_UNSPECIFIED;  // refused by the server, naming what it runs
  v1::OptimizerKind_Parse(absl::StrCat("OPTIMIZER_KIND_", absl::AsciiStrToUpper(o.kind)), &kind);
  p.set_kind(kind);
  p.set_lr(o.lr);
  p.set_momentum(o.momentum);
  p.set_weight_decay(o.weight_decay);
  p.set_beta1(o.beta1);
  p.set_beta2(o.beta2);
  p.set_eps(o.eps);
  for (const OptimizerChoice::Group& g : o.groups) {
    v1::ParamGroup* out = p.add_groups();
    for (const std::string& t : g.tensors) out->add_tensors(t);
    out->set_lr(g.lr);
    out->set_weight_decay(g.weight_decay);
    out->mutable_options()->insert(g.options.begin(), g.options.end());
  }
  p.mutable_options()->insert(o.options.begin(), o.options.end());
  return p;
}

}  // namespace

v1::JoinHeader JoinHeaderOf(const JoinRequest& r, const ModelLayout& layout, bool offer_bfloat16) {
  v1::JoinHeader h;
  h.set_name(r.worker.name);
  h.set_host(r.worker.host);
  h.set_device(r.worker.device == DeviceKind::kCuda ? v1::DEVICE_CUDA : v1::DEVICE_CPU);
  h.set_max_batch_size(r.worker.max_batch_size);
  h.set_dataset_size(r.worker.dataset_size);
  h.set_job_samples(r.worker.job_samples);
  *h.mutable_layout() = LayoutToProto(layout);
  h.set_has_initial_parameters(r.has_initial_parameters);
  h.set_resume_worker_id(r.resume_worker_id);
  h.set_resume_secret(r.resume_secret);
  h.add_wire_dtypes(v1::WIRE_DTYPE_F32);
  if (offer_bfloat16) h.add_wire_dtypes(v1::WIRE_DTYPE_BF16);
  h.set_accepts_send_model(true);
  h.set_takes_local_steps(r.worker.takes_local_steps);
  if (r.worker.optimizer.has_value()) *h.mutable_optimizer() = OptimizerSpecOf(*r.worker.optimizer);
  return h;
}

JoinReply JoinReplyOf(const v1::JoinResponse& r) {
  JoinReply out;
  out.send_model = r.send_model();
  out.message = r.message();
  out.action = ActionOf(r.action());
  out.job_finished = r.job_finished();
  out.finished_version = r.finished_version();
  out.worker_id = r.worker_id();
  out.session_secret = r.session_secret();
  out.lease_seconds = r.lease_seconds();
  out.mode = ModeOf(r.mode());
  out.local_steps = std::max<int>(1, static_cast<int>(r.local_steps()));
  out.local_batch = std::max<int64_t>(0, r.local_batch());
  out.batch_size = r.batch_size();
  out.samples = AssignmentOf(r.samples());
  out.idle = r.idle();
  out.global_samples = r.global_samples();
  out.push_trailer = r.push_trailer();
  out.bfloat16 = r.wire_dtype() == v1::WIRE_DTYPE_BF16;
  if (r.has_shard_map() && r.shard_map().shards() > 1) {
    out.shards = static_cast<int>(r.shard_map().shards());
    out.partition_bytes = r.shard_map().partition_bytes();
    out.shard_fingerprint = r.shard_map().fingerprint();
    out.shard_addresses.assign(r.shard_map().addresses().begin(), r.shard_map().addresses().end());
    out.push_slices_in_order = r.shard_map().push_in_order();
    out.whole_tensors = r.shard_map().whole_tensors();
  }
  return out;
}

// A step's end goes in the trailer of a streamed push, or in the header of a whole one.
template <typename Message>
void SetStepEnd(const StepEnd& end, Message* m) {
  m->set_compute_seconds(end.compute_seconds);
  m->set_train_loss(end.train_loss);
  if (end.test_accuracy) m->set_test_accuracy(*end.test_accuracy);
  m->set_accuracy_is_validation(end.accuracy_is_validation);
  for (double r : end.group_lr) m->add_group_lr(r);
  if (end.emulation_overruns) m->set_emulation_overruns(*end.emulation_overruns);
}

v1::PushTrailer TrailerOf(const StepEnd& end) {
  v1::PushTrailer t;
  SetStepEnd(end, &t);
  return t;
}

v1::PushHeader PushHeaderOf(const PushedStep& p) {
  v1::PushHeader h;
  h.set_worker_id(p.worker_id);
  h.set_model_version(p.model_version);
  h.set_batch_size(p.step.batch_size);
  h.set_communication_seconds(p.step.communication_seconds);
  // The count before the step ran; a whole push's end (sent after the step) has its own.
  h.set_emulation_overruns(p.step.emulation_overruns);
  SetStepEnd(p.step.end, &h);
  h.set_out_of_memory(p.step.out_of_memory);
  h.set_report_only(p.step.report_only);
  h.set_idle(p.step.idle);
  h.set_shard_held_seconds(p.step.shard_held_seconds);
  h.set_resend(p.resend);
  return h;
}

PushReply PushReplyOf(const v1::PushResponse& r) {
  PushReply out;
  out.action = ActionOf(r.action());
  out.applied = r.applied();
  out.message = r.message();
  out.model_version = r.model_version();
  out.next_batch_size = r.next_batch_size();
  out.samples = AssignmentOf(r.samples());
  out.idle = r.idle();
  out.global_samples = r.global_samples();
  out.held_seconds = r.held_seconds();
  return out;
}

}  // namespace worker
}  // namespace omnilearn
