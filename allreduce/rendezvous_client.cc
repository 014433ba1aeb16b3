#include "allreduce/rendezvous_client.h"

#include <utility>

#include "common/grpc_status.h"
#include "grpcpp/grpcpp.h"

namespace ps::allreduce {
namespace {

// A call's own deadline: the coordinator's wait and a margin for the trip.
void SetDeadline(grpc::ClientContext& context, absl::Duration wait) {
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + wait + absl::Seconds(10)));
}

}  // namespace

RendezvousClient::RendezvousClient(const std::string& address)
    : stub_(proto::RingRendezvous::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

absl::StatusOr<uint64_t> RendezvousClient::Join(int rank, int num_workers,
                                                const std::string& job_id,
                                                absl::Duration timeout) {
  proto::JoinRequest request;
  request.set_rank(rank);
  request.set_num_workers(num_workers);
  request.set_job_id(job_id);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::JoinReply reply;
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  // The coordinator may start after the workers.
  context.set_wait_for_ready(true);
  grpc::Status status = stub_->Join(&context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  return reply.round();
}

absl::Status RendezvousClient::Set(const std::string& key,
                                   const std::string& value) {
  proto::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  proto::SetReply reply;
  grpc::ClientContext context;
  SetDeadline(context, absl::ZeroDuration());
  return FromGrpcStatus(stub_->Set(&context, request, &reply));
}

absl::StatusOr<std::vector<std::string>> RendezvousClient::Get(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  proto::GetRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  proto::GetReply reply;
  grpc::ClientContext context;
  SetDeadline(context, timeout);
  grpc::Status status = stub_->Get(&context, request, &reply);
  if (!status.ok()) return FromGrpcStatus(status);
  if (reply.values_size() != static_cast<int>(keys.size())) {
    return absl::DataLossError("the coordinator answered a Get with " +
                               std::to_string(reply.values_size()) +
                               " values for " + std::to_string(keys.size()) +
                               " keys");
  }
  return std::vector<std::string>(reply.values().begin(), reply.values().end());
}

}  // namespace ps::allreduce
