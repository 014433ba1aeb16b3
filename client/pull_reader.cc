#include "client/pull_reader.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/chunk_wire.h"
#include "common/grpc_status.h"
#include "common/tensor_codec.h"

namespace ps::client_internal {

void ShapeWeights(const ModelSpec& model, TensorValues& weights) {
  weights.resize(model.tensors.size());
  for (size_t t = 0; t < model.tensors.size(); ++t) {
    weights[t].resize(model.tensors[t].num_elements());
  }
}

void AddPullEncodings(absl::Span<const WireEncoding> encodings,
                      google::protobuf::RepeatedField<int>* out) {
  size_t end = encodings.size();
  while (end > 0 && encodings[end - 1] == WireEncoding::kFloat32) --end;
  for (size_t t = 0; t < end; ++t) out->Add(static_cast<int>(encodings[t]));
}

PullReader::PullReader(const Partition& partition, int server,
                       TensorValues& weights,
                       absl::Span<const WireEncoding> encodings)
    : model_(partition.model()),
      slices_(partition.SlicesOfServer(server)),
      weights_(weights),
      encodings_(encodings),
      next_offset_(slices_.empty() ? 0 : slices_[0].offset) {}

void PullReader::Add(const grpc::ByteBuffer& message) {
  if (!error_.ok()) return;
  absl::Cord data;  // The chunk's bytes, left in the received slices.
  if (absl::Status s =
          ParseChunkMessage(message, kPullResponseChunk, &response_, &data);
      !s.ok()) {
    error_ = absl::DataLossError(s.message());
    return;
  }
  if (!version_.has_value()) version_ = response_.version();
  const proto::TensorChunk& chunk = response_.chunk();
  if (slice_index_ == slices_.size()) {
    error_ = absl::DataLossError("server sent more chunks than it holds");
    return;
  }
  const Slice& slice = slices_[slice_index_];
  const WireEncoding expected = slice.tensor_id < encodings_.size()
                                    ? encodings_[slice.tensor_id]
                                    : WireEncoding::kFloat32;
  const uint64_t slice_end = slice.offset + slice.num_elements;
  if (chunk.tensor_id() != slice.tensor_id || chunk.offset() != next_offset_ ||
      chunk.num_elements() == 0 ||
      chunk.num_elements() > slice_end - next_offset_ ||
      chunk.dtype() != proto::DTYPE_FLOAT32 ||
      chunk.encoding() != static_cast<int>(expected)) {
    error_ = absl::DataLossError(absl::StrCat(
        "unexpected chunk: tensor ", chunk.tensor_id(), " [", chunk.offset(),
        ", +", chunk.num_elements(), ") encoded ", chunk.encoding(),
        "; expected tensor ", slice.tensor_id, " from element ", next_offset_,
        " encoded ", static_cast<int>(expected)));
    return;
  }
  const std::vector<int64_t>& shape = model_.tensors[slice.tensor_id].shape;
  if (!std::equal(shape.begin(), shape.end(), chunk.shape().begin(),
                  chunk.shape().end())) {
    error_ = absl::DataLossError(
        absl::StrCat("chunk of tensor ", slice.tensor_id,
                     " has a shape other than the model's"));
    return;
  }
  const absl::Span<float> dst =
      absl::MakeSpan(weights_[slice.tensor_id])
          .subspan(chunk.offset(), chunk.num_elements());
  error_ = DecodeEncoded(expected, data, dst, chunk.scale_exponent());
  next_offset_ += chunk.num_elements();
  if (next_offset_ == slice_end && ++slice_index_ < slices_.size()) {
    next_offset_ = slices_[slice_index_].offset;
  }
}

absl::Status PullReader::Finish() const {
  if (!error_.ok()) return error_;
  if (slice_index_ != slices_.size()) {
    return absl::DataLossError(absl::StrCat("pull ended after ", slice_index_,
                                            " of ", slices_.size(), " slices"));
  }
  return absl::OkStatus();
}

absl::Status ReceiveWeights(ClientStream& call, const Partition& partition,
                            int server, TensorValues& weights,
                            uint64_t* version,
                            absl::Span<const WireEncoding> encodings) {
  PullReader reader(partition, server, weights, encodings);
  grpc::ByteBuffer message;
  while (call.Read(&message)) reader.Add(message);
  if (reader.version().has_value()) *version = *reader.version();
  if (absl::Status s = FromGrpcStatus(call.Finish()); !s.ok()) return s;
  return reader.Finish();
}

}  // namespace ps::client_internal
