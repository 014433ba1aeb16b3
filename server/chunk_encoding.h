#ifndef PS_SERVER_CHUNK_ENCODING_H_
#define PS_SERVER_CHUNK_ENCODING_H_

// Where a shard meets compressed chunks (ps.proto Encoding): at its service
// edge, so that everything behind it (the push stager, the update
// coordinator and its log, checkpoints, the sync sum) sees float32 only.

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/cord.h"
#include "absl/types/span.h"
#include "common/model_spec.h"
#include "common/wire_encoding.h"
#include "google/protobuf/repeated_field.h"
#include "grpcpp/support/slice.h"
#include "proto/parameter_server.pb.h"

namespace ps::server {

// Rewrites a pushed chunk written in any encoding as the float32 chunk it
// stands for: `*data` becomes num_elements float32 values and the chunk's
// encoding ENCODING_FLOAT32. A float32 chunk is left as it is (the stager
// checks it). InvalidArgument naming the tensor (and changing nothing) for
// an unknown encoding, a tensor id or range outside the model, or data
// that is not a valid encoding of the range (common/wire_encoding.h).
absl::Status DecodePushedChunk(const ModelSpec& model,
                               proto::TensorChunk* chunk, absl::Cord* data);

// The encoding of each of `model`'s tensors that a pull asked for
// (ps.proto PullRequest.tensor_encodings; float32 for the tensors past its
// end). InvalidArgument naming the tensor for an encoding unknown or not
// one for weights (top-k), or for more entries than tensors.
absl::StatusOr<std::vector<WireEncoding>> PullEncodings(
    const ModelSpec& model,
    const google::protobuf::RepeatedField<int>& requested);

// The data of a pulled chunk of `values` in `encoding`, which it sets in
// `chunk` (with the scale exponent): float32 is a slice over the values'
// memory, kept alive by `owner`; the others are encoded into a new one.
grpc::Slice PulledChunkData(WireEncoding encoding,
                            std::shared_ptr<const void> owner,
                            absl::Span<const float> values,
                            proto::TensorChunk* chunk);

}  // namespace ps::server

#endif  // PS_SERVER_CHUNK_ENCODING_H_
