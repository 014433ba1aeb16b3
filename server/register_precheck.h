#ifndef PS_SERVER_REGISTER_PRECHECK_H_
#define PS_SERVER_REGISTER_PRECHECK_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_spec.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/parameter_server.pb.h"
#include "server/request_header.h"

namespace ps::server {

// Parsing a RegisterRequest costs many times its size (a protobuf object
// and a TensorSpec per declared tensor), so a Register is looked at before
// it is parsed: its size, its header and how many tensors it declares.

// The most bytes a RegisterRequest within `limits` may take: every tensor
// with the longest name and shape and every initializer field, plus the
// header and the optimizer.
size_t MaxRegisterBytes(const DeclarationLimits& limits);

// What a serialized RegisterRequest says before it is parsed.
struct RegisterPreview {
  proto::RequestHeader header;
  // Tensors the declaration holds.
  uint64_t tensors = 0;
};

// Reads the header of a serialized RegisterRequest and counts the tensors
// of its declaration, skipping every other field unparsed.
// InvalidArgument if the bytes are no RegisterRequest.
absl::StatusOr<RegisterPreview> PreviewRegister(absl::string_view bytes);
// The same, reading the message where it lies.
absl::StatusOr<RegisterPreview> PreviewRegister(
    const grpc::ByteBuffer& message);

// Refuses a serialized RegisterRequest before it is parsed:
// InvalidArgument for one larger than MaxRegisterBytes(limits), or that
// declares more than limits.max_tensors tensors; as ValidateRequestHeader
// for a header that does not match `shard` (whose fingerprint is not
// checked here: a declaration that differs is named once parsed);
// Unavailable for a rank other than 0 while no model is `declared`.
absl::Status PrecheckRegister(const grpc::ByteBuffer& message,
                              const DeclarationLimits& limits,
                              const ShardIdentity& shard, bool declared);

}  // namespace ps::server

#endif  // PS_SERVER_REGISTER_PRECHECK_H_
