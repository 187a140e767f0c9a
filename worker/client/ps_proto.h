// The worker's terms (ps_types.h) to the proto and back: the gRPC client's own, kept
// apart so the mapping is tested on its own (ps_proto_test.cc).
#ifndef OMNILEARN_WORKER_CLIENT_PS_PROTO_H_
#define OMNILEARN_WORKER_CLIENT_PS_PROTO_H_

#include "common/model_layout.h"
#include "proto/omnilearn.pb.h"
#include "worker/client/ps_types.h"

namespace omnilearn {
namespace worker {

// CONTINUE, and the deprecated PULL that servers of earlier releases sent for the same
// thing, are kContinue.
Action ActionOf(v1::Action a);
std::optional<Mode> ModeOf(v1::Mode m);  // none for MODE_UNSPECIFIED
Assignment AssignmentOf(const google::protobuf::RepeatedPtrField<v1::SampleSpan>& spans);

// The join's header with the model's layout. It offers float32 and, with
// `offer_bfloat16`, bfloat16 on the wire: a server run with --wire_dtype=bf16 then uses it.
v1::JoinHeader JoinHeaderOf(const JoinRequest& r, const ModelLayout& layout, bool offer_bfloat16);
JoinReply JoinReplyOf(const v1::JoinResponse& r);

// A push's header (without the session secret and wire dtype, which the client adds).
v1::PushHeader PushHeaderOf(const PushedStep& p);
v1::PushTrailer TrailerOf(const StepEnd& end);
PushReply PushReplyOf(const v1::PushResponse& r);

}  // namespace worker
}  // namespace omnilearn

#endif  // OMNILEARN_WORKER_CLIENT_PS_PROTO_H_
