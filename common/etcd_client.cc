#include "common/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "proto/etcd.grpc.pb.h"

namespace omnilearn {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// HOST:PORT with a port in 1..65535 and a host.
bool IsHostPort(absl::string_view endpoint) {
  const size_t colon = endpoint.rfind(':');
  int port = 0;
  return colon != absl::string_view::npos && colon > 0 && absl::SimpleAtoi(endpoint.substr(colon + 1), &port) &&
         port > 0 && port < 65536;
}

}  // namespace

bool IsEtcdAddress(absl::string_view address) { return absl::StartsWith(address, kEtcdScheme); }

absl::StatusOr<EtcdTarget> ParseEtcdTarget(absl::string_view address) {
  if (!IsEtcdAddress(address)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not etcd://HOST:PORT[,HOST:PORT...][/KEY]"));
  }
  absl::string_view rest = address.substr(sizeof(kEtcdScheme) - 1);
  EtcdTarget target;
  const size_t slash = rest.find('/');
  target.key = slash == absl::string_view::npos ? kDefaultElectionKey : std::string(rest.substr(slash));
  if (target.key == "/") return absl::InvalidArgumentError(absl::StrCat("\"", address, "\": the key is empty"));
  for (absl::string_view endpoint : absl::StrSplit(rest.substr(0, slash), ',')) {
    if (!IsHostPort(endpoint)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", address, "\": the etcd endpoint \"", endpoint, "\" is not HOST:PORT"));
    }
    target.endpoints.emplace_back(endpoint);
  }
  return target;
}

class EtcdClient::Stubs {
 public:
  explicit Stubs(const std::string& endpoint)
      : channel_(grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials())),
        kv(etcdserverpb::KV::NewStub(channel_)),
        lease(etcdserverpb::Lease::NewStub(channel_)) {}

 private:
  std::shared_ptr<grpc::Channel> channel_;

 public:
  const std::unique_ptr<etcdserverpb::KV::Stub> kv;
  const std::unique_ptr<etcdserverpb::Lease::Stub> lease;
};

EtcdClient::EtcdClient(EtcdTarget target, absl::Duration timeout) : target_(std::move(target)), timeout_(timeout) {
  for (const std::string& endpoint : target_.endpoints) stubs_.push_back(std::make_unique<Stubs>(endpoint));
}

EtcdClient::~EtcdClient() = default;

template <typename Call>
absl::Status EtcdClient::OnSomeEndpoint(const Call& call) const {
  size_t first;
  {
    absl::MutexLock lock(&mu_);
    first = current_;
  }
  absl::Status last = absl::UnavailableError("no etcd endpoint");
  for (size_t i = 0; i < stubs_.size(); ++i) {
    const size_t e = (first + i) % stubs_.size();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
    last = FromGrpc(call(*stubs_[e], &ctx));
    if (!absl::IsUnavailable(last) && !absl::IsDeadlineExceeded(last)) {
      absl::MutexLock lock(&mu_);
      current_ = e;
      return last;
    }
  }
  return absl::Status(last.code(),
                      absl::StrCat("etcd (", absl::StrJoin(target_.endpoints, ","), "): ", last.message()));
}

absl::StatusOr<std::string> EtcdClient::Coordinator() const {
  etcdserverpb::RangeRequest request;
  request.set_key(target_.key);
  etcdserverpb::RangeResponse response;
  absl::Status s =
      OnSomeEndpoint([&](Stubs& stubs, grpc::ClientContext* ctx) { return stubs.kv->Range(ctx, request, &response); });
  if (!s.ok()) return s;
  if (response.kvs_size() == 0) return absl::NotFoundError(absl::StrCat("no coordinator holds ", target_.key));
  if (response.kvs(0).value() == kJobFinished) return Finished();
  return response.kvs(0).value();
}

absl::StatusOr<int64_t> EtcdClient::Grant(absl::Duration ttl, absl::Duration* granted) const {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
  etcdserverpb::LeaseGrantResponse response;
  absl::Status s = OnSomeEndpoint(
      [&](Stubs& stubs, grpc::ClientContext* ctx) { return stubs.lease->LeaseGrant(ctx, request, &response); });
  if (!s.ok()) return s;
  if (!response.error().empty()) return absl::UnavailableError(absl::StrCat("etcd lease: ", response.error()));
  *granted = absl::Seconds(response.ttl());
  return response.id();
}

absl::StatusOr<bool> EtcdClient::TakeKey(const std::string& value, int64_t lease, std::string* holder) const {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* absent = request.add_compare();
  absent->set_key(target_.key);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(target_.key);
  put->set_value(value);
  put->set_lease(lease);
  request.add_failure()->mutable_request_range()->set_key(target_.key);
  etcdserverpb::TxnResponse response;
  absl::Status s =
      OnSomeEndpoint([&](Stubs& stubs, grpc::ClientContext* ctx) { return stubs.kv->Txn(ctx, request, &response); });
  if (!s.ok()) return s;
  if (response.succeeded()) return true;
  holder->clear();
  if (response.responses_size() > 0 && response.responses(0).response_range().kvs_size() > 0) {
    *holder = response.responses(0).response_range().kvs(0).value();
  }
  if (*holder == kJobFinished) return Finished();
  return false;
}

absl::Status EtcdClient::FinishJob(const std::string& value) const {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* ours = request.add_compare();
  ours->set_key(target_.key);
  ours->set_target(etcdserverpb::Compare::VALUE);
  ours->set_result(etcdserverpb::Compare::EQUAL);
  ours->set_value(value);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(target_.key);
  put->set_value(kJobFinished);
  etcdserverpb::TxnResponse response;
  absl::Status s =
      OnSomeEndpoint([&](Stubs& stubs, grpc::ClientContext* ctx) { return stubs.kv->Txn(ctx, request, &response); });
  if (!s.ok()) return s;
  if (!response.succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat("the etcd key ", target_.key, " no longer holds ", value));
  }
  return absl::OkStatus();
}

absl::Status EtcdClient::Finished() const {
  return absl::FailedPreconditionError(absl::StrCat("the job of the etcd key ", target_.key, " is finished"));
}

absl::Status EtcdClient::KeepAlive(int64_t lease) const {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  absl::Status s = OnSomeEndpoint([&](Stubs& stubs, grpc::ClientContext* ctx) {
    auto stream = stubs.lease->LeaseKeepAlive(ctx);
    if (!stream->Write(request) || !stream->Read(&response)) {
      ctx->TryCancel();
      return stream->Finish();
    }
    stream->WritesDone();
    ctx->TryCancel();  // one renewal per call: the stream is not kept open
    stream->Finish();
    return grpc::Status::OK;
  });
  if (!s.ok()) return s;
  if (response.ttl() <= 0) return absl::NotFoundError(absl::StrCat("the etcd lease ", lease, " expired"));
  return absl::OkStatus();
}

absl::Status EtcdClient::Revoke(int64_t lease) const {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return OnSomeEndpoint(
      [&](Stubs& stubs, grpc::ClientContext* ctx) { return stubs.lease->LeaseRevoke(ctx, request, &response); });
}

}  // namespace omnilearn
