#include "server/chunk_encoding.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/chunk_wire.h"
#include "common/tensor_codec.h"

namespace ps::server {

static_assert(
    static_cast<int>(WireEncoding::kFloat32) == proto::ENCODING_FLOAT32 &&
        static_cast<int>(WireEncoding::kBfloat16) == proto::ENCODING_BFLOAT16 &&
        static_cast<int>(WireEncoding::kFloat16) == proto::ENCODING_FLOAT16 &&
        static_cast<int>(WireEncoding::kTopK) == proto::ENCODING_TOP_K,
    "common/wire_encoding.h must mirror the proto");

absl::Status DecodePushedChunk(const ModelSpec& model,
                               proto::TensorChunk* chunk, absl::Cord* data) {
  if (chunk->encoding() == proto::ENCODING_FLOAT32) return absl::OkStatus();
  if (chunk->tensor_id() >= model.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor id ", chunk->tensor_id(), " is not below the ",
                     "model's ", model.tensors.size(), " tensors"));
  }
  const TensorSpec& spec = model.tensors[chunk->tensor_id()];
  const uint64_t size = static_cast<uint64_t>(spec.num_elements());
  const uint64_t offset = chunk->offset();
  const uint64_t n = chunk->num_elements();
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", chunk->tensor_id(), " (", spec.name,
                     ") chunk [", offset, ", +", n, "): ", why));
  };
  absl::StatusOr<WireEncoding> encoding =
      WireEncodingFromNumber(chunk->encoding());
  if (!encoding.ok()) return refuse(encoding.status().message());
  // Bounded before anything is allocated for it.
  if (offset > size || n > size - offset || n > kMaxChunkElements) {
    return refuse(absl::StrCat("not inside the tensor's ", size,
                               " elements (or over a chunk's ",
                               kMaxChunkElements, ")"));
  }
  std::string bytes;
  if (kFloatEncodingIsMemoryImage) {
    // Decoded straight into the bytes the stager reads (new'd memory is
    // aligned for floats).
    bytes.resize(n * sizeof(float));
    absl::Span<float> values(reinterpret_cast<float*>(bytes.data()), n);
    if (absl::Status s =
            DecodeEncoded(*encoding, *data, values, chunk->scale_exponent());
        !s.ok()) {
      return refuse(s.message());
    }
  } else {
    std::vector<float> values(n);
    if (absl::Status s = DecodeEncoded(*encoding, *data, absl::MakeSpan(values),
                                       chunk->scale_exponent());
        !s.ok()) {
      return refuse(s.message());
    }
    EncodeFloats(values, &bytes);
  }
  *data = absl::Cord(std::move(bytes));
  chunk->set_encoding(proto::ENCODING_FLOAT32);
  chunk->set_scale_exponent(0);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<WireEncoding>> PullEncodings(
    const ModelSpec& model,
    const google::protobuf::RepeatedField<int>& requested) {
  if (static_cast<size_t>(requested.size()) > model.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor_encodings has ", requested.size(), " entries for a model of ",
        model.tensors.size(), " tensors"));
  }
  std::vector<WireEncoding> out(model.tensors.size(), WireEncoding::kFloat32);
  for (int t = 0; t < requested.size(); ++t) {
    absl::StatusOr<WireEncoding> encoding =
        WireEncodingFromNumber(requested[t]);
    absl::Status status = encoding.status();
    if (status.ok() && *encoding == WireEncoding::kTopK) {
      status = absl::InvalidArgumentError(
          "top_k is for gradients; weights are pulled dense");
    }
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pull encoding of tensor ", t, " (",
                       model.tensors[t].name, "): ", status.message()));
    }
    out[t] = *encoding;
  }
  return out;
}

grpc::Slice PulledChunkData(WireEncoding encoding,
                            std::shared_ptr<const void> owner,
                            absl::Span<const float> values,
                            proto::TensorChunk* chunk) {
  chunk->set_encoding(static_cast<proto::Encoding>(encoding));
  if (encoding == WireEncoding::kFloat32) {
    chunk->set_scale_exponent(0);
    return SharedFloatsSlice(std::move(owner), values);
  }
  EncodedChunk encoded = EncodeChunk(encoding, values);
  chunk->set_scale_exponent(encoded.scale_exponent);
  return OwnedSlice(std::move(encoded.bytes));
}

}  // namespace ps::server
