#include "server/collective_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chunk_wire.h"
#include "common/grpc_status.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/request_header.h"

namespace ps::server {
namespace {

// FailedPrecondition for another job, InvalidArgument for another protocol,
// shard or a rank outside the job.
absl::Status CheckHeader(const proto::RequestHeader& header,
                         const CollectiveServiceOptions& options) {
  if (header.job_id() != options.job_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("collective of job '", header.job_id(),
                     "' sent to a server of job '", options.job_id, "'"));
  }
  if (header.protocol_version() != kProtocolVersionCurrent) {
    return absl::InvalidArgumentError(
        absl::StrCat("protocol version ", header.protocol_version(),
                     ", this server speaks ", kProtocolVersionCurrent));
  }
  if (header.server_index() != options.server_index) {
    return absl::InvalidArgumentError(
        absl::StrCat("collective meant for server ", header.server_index(),
                     " reached server ", options.server_index));
  }
  return absl::OkStatus();
}

absl::StatusOr<CollectiveCall> CallOf(proto::CollectiveRequest& request) {
  CollectiveCall call;
  switch (request.kind()) {
    case proto::CollectiveRequest::ALLREDUCE:
      call.kind = CollectiveKind::kAllreduce;
      break;
    case proto::CollectiveRequest::ALLGATHER:
      call.kind = CollectiveKind::kAllgather;
      break;
    case proto::CollectiveRequest::BROADCAST:
      call.kind = CollectiveKind::kBroadcast;
      break;
    case proto::CollectiveRequest::BROADCAST_BYTES:
      call.kind = CollectiveKind::kBroadcastBytes;
      break;
    case proto::CollectiveRequest::BARRIER:
      call.kind = CollectiveKind::kBarrier;
      break;
    case proto::CollectiveRequest::JOIN:
      call.kind = CollectiveKind::kJoin;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown collective kind ", request.kind()));
  }
  switch (request.op()) {
    case proto::CollectiveRequest::REDUCE_OP_UNSPECIFIED:
      call.op = CollectiveOp::kNone;
      break;
    case proto::CollectiveRequest::SUM:
      call.op = CollectiveOp::kSum;
      break;
    case proto::CollectiveRequest::AVERAGE:
      call.op = CollectiveOp::kAverage;
      break;
    case proto::CollectiveRequest::MIN:
      call.op = CollectiveOp::kMin;
      break;
    case proto::CollectiveRequest::MAX:
      call.op = CollectiveOp::kMax;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown reduce op ", request.op()));
  }
  if (request.dtype() != proto::DTYPE_FLOAT32 &&
      request.dtype() != proto::DTYPE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", request.dtype()));
  }
  call.float32 = request.dtype() == proto::DTYPE_FLOAT32;
  call.name = request.name();
  call.generation = request.generation();
  call.sequence = request.sequence();
  call.anonymous = request.anonymous();
  call.root_rank = request.root_rank();
  call.shape.assign(request.shape().begin(), request.shape().end());
  call.part = request.part();
  call.num_parts = request.num_parts();
  call.offset = request.offset();
  call.num_elements = request.num_elements();
  call.data = std::move(*request.mutable_data());
  return call;
}

}  // namespace

CollectiveService::CollectiveService(const CollectiveServiceOptions& options)
    : options_(options), table_(options.num_workers, options.cache_bytes) {}

void CollectiveService::AddTo(BlockingStreamService& streams) {
  streams.Handle(
      absl::StrCat("/", proto::Collectives::service_full_name(), "/Collective"),
      [this](ByteStream& stream) { return Serve(stream); });
}

grpc::Status CollectiveService::Serve(ByteStream& stream) {
  grpc::ByteBuffer message;
  if (!stream.Read(&message)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the call carried no CollectiveRequest");
  }
  proto::CollectiveRequest request;
  if (absl::Status s = ParseMessage(message, &request); !s.ok()) {
    return ToGrpcStatus(s);
  }
  if (absl::Status s = CheckHeader(request.header(), options_); !s.ok()) {
    return ToGrpcStatus(s);
  }
  const int rank = request.header().worker_rank();
  absl::StatusOr<CollectiveCall> call = CallOf(request);
  if (!call.ok()) return ToGrpcStatus(call.status());
  absl::StatusOr<std::shared_ptr<const CollectiveResult>> result = table_.Run(
      rank, *std::move(call), [&stream] { return stream.IsCancelled(); });
  if (!result.ok()) return ToGrpcStatus(result.status());
  proto::CollectiveResponse response;
  response.set_data((*result)->data);
  for (int64_t d : (*result)->first_dims) response.add_first_dims(d);
  response.set_last_rank((*result)->last_rank);
  if (!stream.Write(SerializeMessage(response))) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client went away before the answer");
  }
  return grpc::Status::OK;
}

}  // namespace ps::server
