#include "allreduce/rendezvous_service.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace ps::allreduce {
namespace {

absl::Duration Wait(uint64_t timeout_ms) {
  const uint64_t max_ms =
      absl::ToInt64Milliseconds(RendezvousService::kMaxWait);
  return absl::Milliseconds(std::min(timeout_ms, max_ms));
}

grpc::Status Invalid(const std::string& message) {
  return ToGrpcStatus(absl::InvalidArgumentError(message));
}

}  // namespace

RendezvousService::RendezvousService(RendezvousState* state, std::string job_id)
    : state_(state), job_id_(std::move(job_id)) {}

grpc::Status RendezvousService::Join(grpc::ServerContext* /*context*/,
                                     const proto::JoinRequest* request,
                                     proto::JoinReply* reply) {
  if (request->job_id() != job_id_) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat("the coordinator serves job \"", job_id_, "\", not \"",
                     request->job_id(), "\"")));
  }
  if (request->num_workers() != static_cast<uint32_t>(state_->num_workers())) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat("the coordinator expects ", state_->num_workers(),
                     " workers, the caller ", request->num_workers())));
  }
  if (request->rank() >= request->num_workers()) {
    return Invalid(absl::StrCat("rank ", request->rank(), " of ",
                                request->num_workers(), " workers"));
  }
  absl::StatusOr<uint64_t> round = state_->Join(
      static_cast<int>(request->rank()), Wait(request->timeout_ms()));
  if (!round.ok()) return ToGrpcStatus(round.status());
  reply->set_round(*round);
  return grpc::Status::OK;
}

grpc::Status RendezvousService::Set(grpc::ServerContext* /*context*/,
                                    const proto::SetRequest* request,
                                    proto::SetReply* /*reply*/) {
  if (request->key().empty() || request->key().size() > kMaxKeyBytes) {
    return Invalid(absl::StrCat("a key must have 1 to ", kMaxKeyBytes,
                                " bytes, not ", request->key().size()));
  }
  if (request->value().size() > kMaxValueBytes) {
    return Invalid(absl::StrCat("a value may have up to ", kMaxValueBytes,
                                " bytes, not ", request->value().size()));
  }
  state_->Set(request->key(), request->value());
  return grpc::Status::OK;
}

grpc::Status RendezvousService::Get(grpc::ServerContext* /*context*/,
                                    const proto::GetRequest* request,
                                    proto::GetReply* reply) {
  if (request->keys_size() == 0 || request->keys_size() > kMaxKeysPerGet) {
    return Invalid(absl::StrCat("a Get takes 1 to ", kMaxKeysPerGet,
                                " keys, not ", request->keys_size()));
  }
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  absl::StatusOr<std::vector<std::string>> values =
      state_->Get(keys, Wait(request->timeout_ms()));
  if (!values.ok()) return ToGrpcStatus(values.status());
  for (std::string& value : *values) reply->add_values(std::move(value));
  return grpc::Status::OK;
}

}  // namespace ps::allreduce
