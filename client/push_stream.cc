#include "client/push_stream.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "client/pull_reader.h"
#include "client/retry.h"
#include "common/grpc_status.h"

namespace ps::client_internal {

PushCalls::PushCalls(const PushStreamSpec& spec) : spec_(spec) {
  const StepInfo& info = spec.info;
  *prototype_.mutable_header() = spec.shard->Header();
  prototype_.set_step(info.step);
  prototype_.set_base_version(info.base_version);
  prototype_.set_num_examples(info.num_examples);
  prototype_.set_epoch(info.cursor.epoch);
  prototype_.set_examples_done(info.cursor.examples_done);
  if (info.learning_rate.has_value()) {
    prototype_.set_learning_rate(*info.learning_rate);
  }
  if (spec.kind == PushKind::kStepPullAfter) {
    prototype_.set_max_pull_chunk_elements(spec.chunk_elements);
    AddPullEncodings(spec.pull_encodings, prototype_.mutable_pull_encodings());
  }
  if (spec.kind == PushKind::kInitialValues) {
    prototype_.set_initial_values(true);
  }
}

std::unique_ptr<ClientStream> PushCalls::Open() {
  return spec_.shard->OpenStream(
      spec_.kind == PushKind::kStepPullAfter ? "PushPull" : "Push");
}

bool PushCalls::Write(const PushItem& item, ClientStream& call) {
  const Slice& slice = item.slice;
  const std::vector<int64_t>& shape =
      spec_.partition->model().tensors[slice.tensor_id].shape;
  const uint64_t chunk_elements = spec_.chunk_elements;
  proto::TensorChunk chunk;
  chunk.set_tensor_id(slice.tensor_id);
  chunk.set_dtype(proto::DTYPE_FLOAT32);
  chunk.mutable_shape()->Assign(shape.begin(), shape.end());
  chunk.set_encoding(static_cast<proto::Encoding>(item.encoding));
  for (uint64_t done = 0; done < slice.num_elements; done += chunk_elements) {
    const uint64_t n = std::min(chunk_elements, slice.num_elements - done);
    chunk.set_offset(slice.offset + done);
    chunk.set_num_elements(n);
    const absl::Span<const float> values =
        absl::MakeConstSpan(item.tensor_data + slice.offset + done, n);
    grpc::Slice data;
    if (item.encoding == WireEncoding::kFloat32) {
      data = lender_.LendFloats(values);
    } else {
      EncodedChunk encoded = EncodeChunk(item.encoding, values);
      chunk.set_scale_exponent(encoded.scale_exponent);
      data = OwnedSlice(std::move(encoded.bytes));
    }
    if (!call.Write(SerializeChunkMessage(prototype_, chunk, kPushRequestChunk,
                                          std::move(data)))) {
      return false;
    }
  }
  return true;
}

absl::Status PushCalls::Complete(ClientStream& call, bool broken,
                                 TensorValues* weights) {
  if (spec_.kind == PushKind::kStepPullAfter) {
    if (!broken) call.WritesDone();
    // A broken stream shows in the call's status, which this returns.
    return DroppedByShardIsUnavailable(
        ReceiveWeights(call, *spec_.partition, spec_.server, *weights,
                       &pulled_version_, spec_.pull_encodings));
  }
  // The one response is the shard's acknowledgement; its version is not
  // needed here.
  grpc::ByteBuffer response;
  const bool answered = !broken && call.WritesDone() && call.Read(&response);
  absl::Status status =
      DroppedByShardIsUnavailable(FromGrpcStatus(call.Finish()));
  if (status.ok() && !answered) {
    return absl::InternalError("push stream ended without an answer");
  }
  return status;
}

absl::Status PushCalls::RunWithRetry(
    const std::function<absl::Status()>& attempt) {
  const char* what = spec_.kind == PushKind::kStepPullAfter   ? "push and pull"
                     : spec_.kind == PushKind::kInitialValues ? "initial values"
                                                              : "push";
  absl::Status status = spec_.shard->CallWithRetry(what, attempt);
  lender_.AwaitReturned();
  return status;
}

}  // namespace ps::client_internal
