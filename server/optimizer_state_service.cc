#include "server/optimizer_state_service.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/chunk_wire.h"
#include "common/grpc_status.h"
#include "common/tensor_codec.h"
#include "proto/parameter_server.grpc.pb.h"
#include "server/optimizer_state.h"
#include "server/push_message_proto.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

std::string MethodPath(absl::string_view method) {
  return absl::StrCat("/", proto::OptimizerStates::service_full_name(), "/",
                      method);
}

grpc::Status Refused(absl::string_view what, const absl::Status& s) {
  return ToGrpcStatus(
      absl::Status(s.code(), absl::StrCat(what, " refused: ", s.message())));
}

}  // namespace

OptimizerStateService::OptimizerStateService(ShardHost* host,
                                             uint64_t default_chunk_elements,
                                             uint64_t max_chunk_elements)
    : host_(host),
      default_chunk_elements_(default_chunk_elements),
      max_chunk_elements_(max_chunk_elements) {}

void OptimizerStateService::AddTo(BlockingStreamService& streams) {
  streams.Handle(MethodPath("Read"),
                 [this](ByteStream& stream) { return ServeRead(stream); });
  streams.Handle(MethodPath("Write"),
                 [this](ByteStream& stream) { return ServeWrite(stream); });
}

absl::StatusOr<DeclaredShard*> OptimizerStateService::Admit(
    const proto::RequestHeader& caller, absl::string_view what) const {
  absl::StatusOr<DeclaredShard*> shard = host_->Require(what);
  if (!shard.ok()) return shard.status();
  if (absl::Status s = ValidateRequestHeader(RequestHeaderFromProto(caller),
                                             (*shard)->identity);
      !s.ok()) {
    return s;
  }
  if (caller.incarnation() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request of worker ", caller.worker_rank(),
                     " carries no incarnation; requests carry the one it "
                     "registered with"));
  }
  if (absl::Status s = (*shard)->coordinator->CheckRegistered(
          caller.worker_rank(), caller.incarnation());
      !s.ok()) {
    return s;
  }
  if ((*shard)->store->awaiting_initial_values()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank 0 has not sent the initial values of ",
                     (*shard)->store->FirstTensorAwaitingValues(), " yet"));
  }
  return shard;
}

absl::StatusOr<proto::OptimizerStateHeader> OptimizerStateService::Read(
    const proto::RequestHeader& caller,
    std::vector<update::SliceSnapshot>* slices) const {
  absl::StatusOr<DeclaredShard*> shard =
      Admit(caller, "reading the optimizer state");
  if (!shard.ok()) return shard.status();
  const update::ShardStore& store = *(*shard)->store;
  proto::OptimizerStateHeader header;
  if (absl::Status s =
          (*shard)->coordinator->WhileUpdatesPaused([&](uint64_t version) {
            slices->clear();
            for (int i = 0; i < store.num_slices(); ++i) {
              slices->push_back(store.SnapshotOptimizerState(i));
            }
            header = DescribeOptimizerState(store, version, *slices);
            return absl::OkStatus();
          });
      !s.ok()) {
    return s;
  }
  return header;
}

grpc::Status OptimizerStateService::ServeRead(ByteStream& stream) {
  grpc::ByteBuffer message;
  if (!stream.Read(&message)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the call carried no ReadOptimizerStateRequest");
  }
  proto::ReadOptimizerStateRequest request;
  if (absl::Status s = ParseMessage(message, &request); !s.ok()) {
    return ToGrpcStatus(s);
  }
  std::vector<update::SliceSnapshot> slices;
  absl::StatusOr<proto::OptimizerStateHeader> header =
      Read(request.header(), &slices);
  if (!header.ok()) return Refused("optimizer state read", header.status());
  const uint64_t chunk =
      std::min(request.max_chunk_elements() == 0 ? default_chunk_elements_
                                                 : request.max_chunk_elements(),
               max_chunk_elements_);
  proto::ReadOptimizerStateResponse response;
  *response.mutable_state() = *std::move(header);
  bool sent = stream.Write(SerializeMessage(response));
  for (size_t i = 0; sent && i < slices.size(); ++i) {
    for (size_t v = 0; sent && v < slices[i].state.size(); ++v) {
      const std::vector<float>& values = slices[i].state[v].second;
      for (uint64_t begin = 0; sent && begin < values.size(); begin += chunk) {
        const uint64_t n = std::min<uint64_t>(chunk, values.size() - begin);
        proto::ReadOptimizerStateResponse out;
        proto::OptimizerStateChunk* c = out.mutable_chunk();
        c->set_slice(static_cast<uint32_t>(i));
        c->set_vector(static_cast<uint32_t>(v));
        c->set_offset(begin);
        EncodeFloats(absl::MakeConstSpan(values).subspan(begin, n),
                     c->mutable_data());
        sent = stream.Write(SerializeMessage(out));
      }
    }
  }
  if (!sent) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client went away before the answer");
  }
  return grpc::Status::OK;
}

absl::StatusOr<proto::WriteOptimizerStateResponse> OptimizerStateService::Write(
    const proto::WriteOptimizerStateRequest& first,
    const std::function<
        absl::StatusOr<bool>(proto::WriteOptimizerStateRequest*)>& next) {
  absl::StatusOr<DeclaredShard*> shard =
      Admit(first.header(), "writing the optimizer state");
  if (!shard.ok()) return shard.status();
  if (first.header().worker_rank() != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", first.header().worker_rank(),
        " writes the optimizer state; only rank 0 does (the shards hold one "
        "state for every rank)"));
  }
  update::ShardStore& store = *(*shard)->store;
  absl::StatusOr<OptimizerStateAssembly> assembly =
      OptimizerStateAssembly::Start(store, first.state());
  if (!assembly.ok()) return assembly.status();
  if (first.has_chunk()) {
    if (absl::Status s = assembly->Add(first.chunk()); !s.ok()) return s;
  }
  proto::WriteOptimizerStateRequest request;
  for (;;) {
    absl::StatusOr<bool> more = next(&request);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (absl::Status s = assembly->Add(request.chunk()); !s.ok()) return s;
  }
  absl::StatusOr<std::vector<update::SliceSnapshot>> slices =
      std::move(*assembly).Finish();
  if (!slices.ok()) return slices.status();
  proto::WriteOptimizerStateResponse response;
  if (absl::Status s =
          (*shard)->coordinator->WhileUpdatesPaused([&](uint64_t version) {
            if (first.has_at_version() && first.at_version() != version) {
              return absl::AbortedError(absl::StrCat(
                  "the write is for version ", first.at_version(),
                  ", this shard is at version ", version,
                  ": write between steps, before the step's push"));
            }
            response.set_version(version);
            return store.RestoreOptimizerState(*slices);
          });
      !s.ok()) {
    return s;
  }
  spdlog::info("server {}: rank 0 wrote the optimizer state at version {}",
               store.server_index(), response.version());
  if ((*shard)->checkpointer != nullptr) {
    absl::StatusOr<std::string> path = (*shard)->checkpointer->WriteNow();
    if (!path.ok()) {
      return absl::InternalError(absl::StrCat(
          "the optimizer state was applied at version ", response.version(),
          " but the checkpoint that keeps it across a restart failed (",
          path.status().message(), "); write it again"));
    }
    response.set_durable(true);
  }
  return response;
}

grpc::Status OptimizerStateService::ServeWrite(ByteStream& stream) {
  grpc::ByteBuffer message;
  if (!stream.Read(&message)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the call carried no WriteOptimizerStateRequest");
  }
  proto::WriteOptimizerStateRequest first;
  if (absl::Status s = ParseMessage(message, &first); !s.ok()) {
    return ToGrpcStatus(s);
  }
  absl::StatusOr<proto::WriteOptimizerStateResponse> response = Write(
      first,
      [&stream](
          proto::WriteOptimizerStateRequest* request) -> absl::StatusOr<bool> {
        grpc::ByteBuffer buffer;
        if (!stream.Read(&buffer)) {
          if (stream.IsCancelled()) {
            return absl::CancelledError("the client cancelled the write");
          }
          return false;
        }
        if (absl::Status s = ParseMessage(buffer, request); !s.ok()) return s;
        return true;
      });
  if (!response.ok()) {
    return Refused("optimizer state write", response.status());
  }
  if (!stream.Write(SerializeMessage(*response))) {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        "the client went away before the answer");
  }
  return grpc::Status::OK;
}

}  // namespace ps::server
