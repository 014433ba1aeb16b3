#include "client/optimizer_state_calls.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/byte_stream_call.h"
#include "common/chunk_wire.h"
#include "common/grpc_status.h"
#include "common/tensor_codec.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps::client_internal {
namespace {

std::string MethodPath(absl::string_view method) {
  return absl::StrCat("/", proto::OptimizerStates::service_full_name(), "/",
                      method);
}

proto::OptimizerDeclaration::Kind WireKind(OptimizerKind kind) {
  return kind == OptimizerKind::kAdam ? proto::OptimizerDeclaration::ADAM
                                      : proto::OptimizerDeclaration::SGD;
}

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("its optimizer state does not fit the declaration: ", what));
}

// The tensors' state as gathered so far, and how many elements of each
// vector have come.
struct Gathered {
  OptimizerState state;
  std::vector<std::vector<uint64_t>> filled;
  std::vector<bool> seen;  // A slice of the tensor was described.
};

// Takes a shard's header: its slices must be the partition's, with the
// vectors other slices of their tensor have.
absl::Status TakeHeader(const Partition& partition, int server,
                        const proto::OptimizerStateHeader& header,
                        Gathered& gathered) {
  const std::vector<Slice>& slices = partition.SlicesOfServer(server);
  if (header.format() != proto::OPTIMIZER_STATE_FORMAT_CURRENT) {
    return Malformed(absl::StrCat("format ", header.format()));
  }
  const OptimizerKind kind = header.kind() == proto::OptimizerDeclaration::ADAM
                                 ? OptimizerKind::kAdam
                                 : OptimizerKind::kSgd;
  if (server == 0) {
    gathered.state.kind = kind;
    gathered.state.version = header.version();
  } else if (kind != gathered.state.kind) {
    return Malformed("the shards run different optimizers");
  }
  gathered.state.version = std::min(gathered.state.version, header.version());
  if (header.slices_size() != static_cast<int>(slices.size())) {
    return Malformed(
        absl::StrCat(header.slices_size(), " slices of ", slices.size()));
  }
  for (size_t i = 0; i < slices.size(); ++i) {
    const proto::OptimizerSliceState& in = header.slices(i);
    const Slice& slice = slices[i];
    const TensorSpec& tensor = partition.model().tensors[slice.tensor_id];
    if (in.tensor() != tensor.name || in.offset() != slice.offset ||
        in.num_elements() != slice.num_elements) {
      return Malformed(absl::StrCat("slice ", i, " is not ", tensor.name, " [",
                                    slice.offset, ", ",
                                    slice.offset + slice.num_elements, ")"));
    }
    TensorOptimizerState& out = gathered.state.tensors[slice.tensor_id];
    std::vector<std::string> names(in.vectors().begin(), in.vectors().end());
    if (!gathered.seen[slice.tensor_id]) {
      gathered.seen[slice.tensor_id] = true;
      out.update_count = in.update_count();
      for (std::string& name : names) {
        out.vectors.emplace_back(std::move(name),
                                 std::vector<float>(tensor.num_elements()));
      }
      gathered.filled[slice.tensor_id].assign(out.vectors.size(), 0);
      continue;
    }
    out.update_count = std::min(out.update_count, in.update_count());
    bool same = names.size() == out.vectors.size();
    for (size_t v = 0; same && v < names.size(); ++v) {
      same = names[v] == out.vectors[v].first;
    }
    if (!same) {
      return Malformed(absl::StrCat("slices of ", tensor.name,
                                    " keep different state vectors"));
    }
  }
  return absl::OkStatus();
}

absl::Status TakeChunk(const Partition& partition, int server,
                       const proto::OptimizerStateChunk& chunk,
                       Gathered& gathered) {
  const std::vector<Slice>& slices = partition.SlicesOfServer(server);
  if (chunk.slice() >= slices.size()) {
    return Malformed(absl::StrCat("a chunk of slice ", chunk.slice()));
  }
  const Slice& slice = slices[chunk.slice()];
  TensorOptimizerState& out = gathered.state.tensors[slice.tensor_id];
  if (chunk.vector() >= out.vectors.size() ||
      chunk.data().size() % sizeof(float) != 0) {
    return Malformed(absl::StrCat("a chunk of vector ", chunk.vector(), " of ",
                                  chunk.data().size(), " bytes"));
  }
  const uint64_t n = chunk.data().size() / sizeof(float);
  if (chunk.offset() > slice.num_elements ||
      n > slice.num_elements - chunk.offset()) {
    return Malformed(absl::StrCat("a chunk beyond its slice of ",
                                  slice.num_elements, " elements"));
  }
  std::vector<float>& values = out.vectors[chunk.vector()].second;
  if (absl::Status s = DecodeFloats(
          chunk.data(),
          absl::MakeSpan(values).subspan(slice.offset + chunk.offset(), n));
      !s.ok()) {
    return Malformed(s.message());
  }
  gathered.filled[slice.tensor_id][chunk.vector()] += n;
  return absl::OkStatus();
}

// One attempt at reading shard `server` into `gathered` (reset first).
absl::Status ReadShard(const Partition& partition, int server,
                       const OptimizerStateShard& shard,
                       uint64_t chunk_elements, Gathered& gathered) {
  grpc::GenericStub stub(shard.channel);
  ByteStreamCall call(&stub, MethodPath("Read"));
  proto::ReadOptimizerStateRequest request;
  *request.mutable_header() = shard.header;
  request.set_max_chunk_elements(chunk_elements);
  grpc::ByteBuffer message;
  absl::Status taken = absl::OkStatus();
  bool first = true;
  if (call.WriteLast(SerializeMessage(request))) {
    while (taken.ok() && call.Read(&message)) {
      proto::ReadOptimizerStateResponse response;
      taken = ParseMessage(message, &response);
      if (!taken.ok()) break;
      taken = first ? TakeHeader(partition, server, response.state(), gathered)
                    : TakeChunk(partition, server, response.chunk(), gathered);
      first = false;
    }
  }
  const absl::Status status = FromGrpcStatus(call.Finish());
  if (!taken.ok()) return taken;
  if (!status.ok()) return DroppedByShardIsUnavailable(status);
  if (first) return Malformed("an empty answer");
  return absl::OkStatus();
}

// The header and chunks of `state`'s part on shard `server`.
std::vector<proto::WriteOptimizerStateRequest> WriteMessages(
    const Partition& partition, int server, const OptimizerStateShard& shard,
    const OptimizerState& state, std::optional<uint64_t> at_version,
    uint64_t chunk_elements) {
  std::vector<proto::WriteOptimizerStateRequest> messages(1);
  proto::WriteOptimizerStateRequest& first = messages[0];
  *first.mutable_header() = shard.header;
  if (at_version.has_value()) first.set_at_version(*at_version);
  proto::OptimizerStateHeader* header = first.mutable_state();
  header->set_format(proto::OPTIMIZER_STATE_FORMAT_CURRENT);
  header->set_kind(WireKind(state.kind));
  const std::vector<Slice>& slices = partition.SlicesOfServer(server);
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& slice = slices[i];
    const TensorSpec& tensor = partition.model().tensors[slice.tensor_id];
    const TensorOptimizerState& in = state.tensors[slice.tensor_id];
    proto::OptimizerSliceState* out = header->add_slices();
    out->set_tensor(tensor.name);
    for (int64_t d : tensor.shape) out->add_shape(d);
    out->set_offset(slice.offset);
    out->set_num_elements(slice.num_elements);
    out->set_update_count(in.update_count);
    for (size_t v = 0; v < in.vectors.size(); ++v) {
      out->add_vectors(in.vectors[v].first);
      const absl::Span<const float> values =
          absl::MakeConstSpan(in.vectors[v].second)
              .subspan(slice.offset, slice.num_elements);
      for (uint64_t b = 0; b < values.size(); b += chunk_elements) {
        proto::WriteOptimizerStateRequest m;
        proto::OptimizerStateChunk* c = m.mutable_chunk();
        c->set_slice(static_cast<uint32_t>(i));
        c->set_vector(static_cast<uint32_t>(v));
        c->set_offset(b);
        EncodeFloats(values.subspan(b, chunk_elements), c->mutable_data());
        messages.push_back(std::move(m));
      }
    }
  }
  return messages;
}

absl::Status WriteShard(
    const std::vector<proto::WriteOptimizerStateRequest>& messages,
    const OptimizerStateShard& shard) {
  grpc::GenericStub stub(shard.channel);
  ByteStreamCall call(&stub, MethodPath("Write"));
  bool sent = true;
  for (size_t i = 0; sent && i < messages.size(); ++i) {
    const grpc::ByteBuffer bytes = SerializeMessage(messages[i]);
    sent = i + 1 == messages.size() ? call.WriteLast(bytes) : call.Write(bytes);
  }
  grpc::ByteBuffer message;
  const bool answered = sent && call.Read(&message);
  const absl::Status status = FromGrpcStatus(call.Finish());
  if (!status.ok()) return DroppedByShardIsUnavailable(status);
  proto::WriteOptimizerStateResponse response;
  if (!answered || !ParseMessage(message, &response).ok()) {
    return absl::DataLossError("the optimizer state write got no answer");
  }
  return absl::OkStatus();
}

absl::Status Annotated(const OptimizerStateShard& shard,
                       const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(shard.name, ": ", s.message()));
}

}  // namespace

absl::StatusOr<OptimizerState> ReadOptimizerState(
    const Partition& partition, const std::vector<OptimizerStateShard>& shards,
    uint64_t chunk_elements, const RetryPolicy& retry) {
  const size_t num_tensors = partition.model().tensors.size();
  Gathered gathered;
  gathered.state.tensors.resize(num_tensors);
  gathered.filled.resize(num_tensors);
  gathered.seen.assign(num_tensors, false);
  for (size_t s = 0; s < shards.size(); ++s) {
    // A retried read starts the shard's part again: its chunks overwrite
    // what a failed attempt left, and its counts are those of the last
    // attempt.
    const Gathered before = gathered;
    absl::Status status = RetryWhileUnavailable(
        retry, shards[s].name, "reading the optimizer state", [&] {
          gathered = before;
          return ReadShard(partition, static_cast<int>(s), shards[s],
                           chunk_elements, gathered);
        });
    if (!status.ok()) return Annotated(shards[s], status);
  }
  for (size_t t = 0; t < num_tensors; ++t) {
    const TensorOptimizerState& tensor = gathered.state.tensors[t];
    for (size_t v = 0; v < tensor.vectors.size(); ++v) {
      if (gathered.filled[t][v] != tensor.vectors[v].second.size()) {
        return Malformed(absl::StrCat(
            gathered.filled[t][v], " of ", tensor.vectors[v].second.size(),
            " elements of ", partition.model().tensors[t].name, " ",
            tensor.vectors[v].first, " came"));
      }
    }
  }
  return std::move(gathered.state);
}

absl::Status WriteOptimizerState(const Partition& partition,
                                 const std::vector<OptimizerStateShard>& shards,
                                 const OptimizerState& state,
                                 std::optional<uint64_t> at_version,
                                 uint64_t chunk_elements,
                                 const RetryPolicy& retry) {
  const std::vector<TensorSpec>& tensors = partition.model().tensors;
  if (state.tensors.size() != tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state of ", state.tensors.size(),
                     " tensors, the declared model has ", tensors.size()));
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (const auto& [name, values] : state.tensors[t].vectors) {
      if (values.size() != static_cast<uint64_t>(tensors[t].num_elements())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer state of ", tensors[t].name, ": ", name, " has ",
            values.size(), " values, the tensor ", tensors[t].num_elements()));
      }
    }
  }
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::vector<proto::WriteOptimizerStateRequest> messages =
        WriteMessages(partition, static_cast<int>(s), shards[s], state,
                      at_version, chunk_elements);
    absl::Status status = RetryWhileUnavailable(
        retry, shards[s].name, "writing the optimizer state",
        [&] { return WriteShard(messages, shards[s]); });
    if (!status.ok()) return Annotated(shards[s], status);
  }
  return absl::OkStatus();
}

}  // namespace ps::client_internal
