#include "worker/client/ps_proto.h"

#include "catch2/catch.hpp"

namespace omnilearn {
namespace worker {
namespace {

TEST_CASE("actions: the deprecated PULL and an unset action mean continue", "[ps_proto]") {
  REQUIRE(ActionOf(v1::ACTION_CONTINUE) == Action::kContinue);
  REQUIRE(ActionOf(static_cast<v1::Action>(2)) == Action::kContinue);  // ACTION_PULL, older servers
  REQUIRE(ActionOf(v1::ACTION_UNSPECIFIED) == Action::kContinue);
  REQUIRE(ActionOf(v1::ACTION_REJOIN) == Action::kRejoin);
  REQUIRE(ActionOf(v1::ACTION_STOP) == Action::kStop);
  REQUIRE(ModeOf(v1::MODE_SSP) == Mode::kSsp);
  REQUIRE(std::string(ModeName(ModeOf(v1::MODE_SYNC))) == "sync");
  REQUIRE(std::string(ModeName(ModeOf(v1::MODE_UNSPECIFIED))) == "unknown");
}

TEST_CASE("a join carries the worker, the layout and both wire dtypes; its reply comes back whole", "[ps_proto]") {
  JoinRequest r;
  r.worker = WorkerInfo{"gpu0", "node1", DeviceKind::kCuda, 512, 60000};
  r.has_initial_parameters = true;
  r.resume_worker_id = 7;
  r.resume_secret = "s";
  const ModelLayout layout = *ModelLayout::Create({{"w", {2, 3}}, {"bn.mean", {3}, true}});
  const v1::JoinHeader h = JoinHeaderOf(r, layout, /*offer_bfloat16=*/true);
  REQUIRE(h.name() == "gpu0");
  REQUIRE(h.host() == "node1");
  REQUIRE(h.device() == v1::DEVICE_CUDA);
  REQUIRE(h.max_batch_size() == 512);
  REQUIRE(h.dataset_size() == 60000);
  REQUIRE(h.has_initial_parameters());
  REQUIRE(h.resume_worker_id() == 7);
  REQUIRE(h.resume_secret() == "s");
  REQUIRE(h.layout().tensors_size() == 2);
  REQUIRE(h.layout().tensors(1).buffer());
  REQUIRE(h.wire_dtypes_size() == 2);
  REQUIRE(h.wire_dtypes(1) == v1::WIRE_DTYPE_BF16);
  REQUIRE(JoinHeaderOf(r, layout, false).wire_dtypes_size() == 1);  // float32 only

  v1::JoinResponse resp;
  resp.set_worker_id(3);
  resp.set_session_secret("x");
  resp.set_lease_seconds(60);
  resp.set_mode(v1::MODE_ASYNC);
  resp.set_batch_size(32);
  resp.set_global_samples(100);
  resp.set_push_trailer(true);
  v1::SampleSpan* span = resp.add_samples();
  span->set_epoch(2);
  span->add_ids(5);
  span->add_ids(9);
  const JoinReply j = JoinReplyOf(resp);
  REQUIRE(j.action == Action::kContinue);
  REQUIRE(j.worker_id == 3);
  REQUIRE(j.session_secret == "x");
  REQUIRE(j.lease_seconds == 60);
  REQUIRE(j.mode == Mode::kAsync);
  REQUIRE(j.batch_size == 32);
  REQUIRE(j.global_samples == 100);
  REQUIRE(j.push_trailer);
  REQUIRE(j.samples == Assignment{SampleSpan{2, {5, 9}}});
  REQUIRE(CountSamples(j.samples) == 2);
}

TEST_CASE("a push's accuracy is sent only when measured; its reply comes back whole", "[ps_proto]") {
  PushedStep p;
  p.worker_id = 4;
  p.model_version = 11;
  p.step.batch_size = 64;
  p.step.communication_seconds = 0.5;
  p.step.shard_held_seconds = 0.125;
  p.step.end = StepEnd{0.25, 1.5, std::nullopt};
  v1::PushHeader h = PushHeaderOf(p);
  REQUIRE(h.shard_held_seconds() == 0.125);
  REQUIRE(h.worker_id() == 4);
  REQUIRE(h.model_version() == 11);
  REQUIRE(h.batch_size() == 64);
  REQUIRE(h.communication_seconds() == 0.5);
  REQUIRE(h.compute_seconds() == 0.25);
  REQUIRE(h.train_loss() == 1.5);
  REQUIRE_FALSE(h.has_test_accuracy());
  REQUIRE_FALSE(h.out_of_memory());
  p.step.end.test_accuracy = 0.0;  // measured, and 0: sent
  p.step.report_only = true;
  h = PushHeaderOf(p);
  REQUIRE(h.has_test_accuracy());
  REQUIRE(h.report_only());
  REQUIRE_FALSE(TrailerOf(StepEnd{1, 2, std::nullopt}).has_test_accuracy());
  REQUIRE(TrailerOf(StepEnd{1, 2, 0.75}).test_accuracy() == 0.75);
  REQUIRE_FALSE(TrailerOf(StepEnd{1, 2, 0.75}).accuracy_is_validation());
  REQUIRE(TrailerOf(StepEnd{1, 2, 0.75, /*accuracy_is_validation=*/true}).accuracy_is_validation());
  // The trailer counts the step's own overrun (the header went before the step ran).
  StepEnd overran{1, 2, std::nullopt};
  REQUIRE_FALSE(TrailerOf(overran).has_emulation_overruns());
  overran.emulation_overruns = 3;
  REQUIRE(TrailerOf(overran).emulation_overruns() == 3);
  // A whole push's header goes after its step: the end's count, with the step's own overrun
  // (the count from before the step would put it on the next step).
  p.step.emulation_overruns = 2;
  p.step.end = StepEnd{};
  REQUIRE(PushHeaderOf(p).emulation_overruns() == 2);
  p.step.end = overran;
  REQUIRE(PushHeaderOf(p).emulation_overruns() == 3);

  v1::PushResponse resp;
  resp.set_action(v1::ACTION_REJOIN);
  resp.set_applied(true);
  resp.set_message("m");
  resp.set_model_version(12);
  resp.set_next_batch_size(48);
  resp.set_global_samples(500);
  resp.set_held_seconds(0.25);
  resp.add_samples()->add_ids(1);
  const PushReply r = PushReplyOf(resp);
  REQUIRE(r.held_seconds == 0.25);
  REQUIRE(r.action == Action::kRejoin);
  REQUIRE(r.applied);
  REQUIRE(r.message == "m");
  REQUIRE(r.model_version == 12);
  REQUIRE(r.next_batch_size == 48);
  REQUIRE(r.global_samples == 500);
  REQUIRE(r.samples == Assignment{SampleSpan{0, {1}}});
}

}  // namespace
}  // namespace worker
}  // namespace omnilearn
