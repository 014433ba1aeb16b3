#include "server/register_precheck.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "server/push_message_proto.h"

namespace ps::server {
namespace {

using ::google::protobuf::internal::WireFormatLite;
using ::google::protobuf::io::CodedInputStream;

constexpr int kHeaderField = 1;       // RegisterRequest.header
constexpr int kDeclarationField = 5;  // RegisterRequest.declaration
constexpr int kTensorsField = 1;      // ModelDeclaration.tensors
// A varint's most bytes, and a field's tag and length around its value.
constexpr size_t kVarint = 10;
constexpr size_t kFraming = 1 + kVarint;
// A TensorDeclaration but for its name and shape: dtype, no_weight_decay
// and an Initializer of one kind, six doubles and two integers.
constexpr size_t kTensorFixedBytes = 2 * kFraming + kFraming + 8 * kFraming;
// Header, incarnation, plan, batch, seed and optimizer together.
constexpr size_t kRequestFixedBytes = 1024;

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed ps.proto.RegisterRequest: ", why));
}

// Counts the `tensors` fields of the ModelDeclaration that `input` is
// limited to, skipping each. One of another wire type is no tensor (protobuf
// keeps it as an unknown field).
absl::Status CountTensors(CodedInputStream& input, uint64_t* tensors) {
  for (uint32_t tag; (tag = input.ReadTag()) != 0;) {
    if (WireFormatLite::GetTagFieldNumber(tag) == kTensorsField &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      ++*tensors;
    }
    if (!WireFormatLite::SkipField(&input, tag)) {
      return Malformed("bad declaration");
    }
  }
  return input.ConsumedEntireMessage() ? absl::OkStatus()
                                       : Malformed("bad declaration");
}

}  // namespace

size_t MaxRegisterBytes(const DeclarationLimits& limits) {
  const size_t tensor = kFraming + kFraming + limits.max_name_bytes + kFraming +
                        limits.max_rank * kVarint + kTensorFixedBytes;
  return kRequestFixedBytes + static_cast<size_t>(limits.max_tensors) * tensor;
}

namespace {

absl::StatusOr<RegisterPreview> Preview(CodedInputStream& input) {
  RegisterPreview preview;
  for (uint32_t tag; (tag = input.ReadTag()) != 0;) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool delimited = WireFormatLite::GetTagWireType(tag) ==
                           WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (delimited && (field == kHeaderField || field == kDeclarationField)) {
      uint32_t length = 0;
      if (!input.ReadVarint32(&length)) return Malformed("bad length");
      const CodedInputStream::Limit limit = input.PushLimit(length);
      if (field == kHeaderField) {
        // As protobuf does, a repeated message field merges.
        std::string header;
        if (!input.ReadString(&header, length) ||
            !preview.header.MergeFromString(header)) {
          return Malformed("bad header");
        }
      } else if (absl::Status s = CountTensors(input, &preview.tensors);
                 !s.ok()) {
        return s;
      }
      input.PopLimit(limit);
      continue;
    }
    if (!WireFormatLite::SkipField(&input, tag)) return Malformed("bad field");
  }
  if (!input.ConsumedEntireMessage()) return Malformed("bad field");
  return preview;
}

}  // namespace

absl::StatusOr<RegisterPreview> PreviewRegister(absl::string_view bytes) {
  CodedInputStream input(reinterpret_cast<const uint8_t*>(bytes.data()),
                         static_cast<int>(bytes.size()));
  return Preview(input);
}

absl::StatusOr<RegisterPreview> PreviewRegister(
    const grpc::ByteBuffer& message) {
  grpc::ByteBuffer shared(message);  // Shares the slices, copies no byte.
  grpc::ProtoBufferReader reader(&shared);
  CodedInputStream input(&reader);
  return Preview(input);
}

absl::Status PrecheckRegister(const grpc::ByteBuffer& message,
                              const DeclarationLimits& limits,
                              const ShardIdentity& shard, bool declared) {
  const size_t bound = MaxRegisterBytes(limits);
  if (message.Length() > bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a RegisterRequest of ", message.Length(), " bytes is larger than ",
        bound, ", what a declaration within this server's limits takes (",
        limits.max_tensors, " tensors, names of ", limits.max_name_bytes,
        " bytes)"));
  }
  absl::StatusOr<RegisterPreview> preview = PreviewRegister(message);
  if (!preview.ok()) return preview.status();
  const RequestHeaderFields header = RequestHeaderFromProto(preview->header);
  ShardIdentity unchecked_fingerprint = shard;
  unchecked_fingerprint.partition_fingerprint = header.partition_fingerprint;
  if (absl::Status s = ValidateRequestHeader(header, unchecked_fingerprint);
      !s.ok()) {
    return s;
  }
  if (!declared && header.worker_rank != 0) {
    return absl::UnavailableError(
        absl::StrCat("rank ", header.worker_rank,
                     " must wait: rank 0 has not declared the model yet"));
  }
  if (preview->tensors > static_cast<uint64_t>(limits.max_tensors)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the declaration holds ", preview->tensors,
                     " tensors; the limit is ", limits.max_tensors));
  }
  return absl::OkStatus();
}

}  // namespace ps::server
