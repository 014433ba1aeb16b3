#ifndef PS_COMMON_CHUNK_WIRE_H_
#define PS_COMMON_CHUNK_WIRE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "proto/parameter_server.pb.h"

namespace ps {

// Messages that carry tensor bytes (PushRequest, PullResponse: an embedded
// TensorChunk whose `data` holds them) on the wire without the copies that
// protobuf `bytes` costs through gRPC.
//
// Serialized the usual way, a chunk's bytes are copied into the message's
// string, then into gRPC's buffer; parsed, out of gRPC's buffer into a string,
// then to where they belong: four user-space copies per direction on top of
// the kernel's two, a large share of a transfer's CPU (bench/README.md, "Large
// transfers over gRPC"). Here the bytes are one slice of the gRPC buffer,
// pointing at their memory, and a parsed message leaves them in the received
// slices for the reader to copy once, straight to their destination. The result
// is the standard protobuf encoding either way: a peer using the generated
// classes reads and writes the same bytes.

// The most elements a chunk carries (32 MiB of float32): clients send and
// ask for no more (ClientOptions.chunk_elements), and a server's message
// limit needs to hold no more than one of them and its message's fields.
inline constexpr uint64_t kMaxChunkElements = uint64_t{8} << 20;

// Where the bytes sit: `chunk` is the field number of the message's
// embedded chunk, `data` the chunk's bytes field.
struct ChunkFields {
  int chunk = 0;
  int data = 0;
};

// The two messages of ps.proto that carry a chunk.
inline constexpr ChunkFields kPushRequestChunk = {
    proto::PushRequest::kChunkFieldNumber,
    proto::TensorChunk::kDataFieldNumber};
inline constexpr ChunkFields kPullResponseChunk = {
    proto::PullResponse::kChunkFieldNumber,
    proto::TensorChunk::kDataFieldNumber};

// Serializes `message` plus field `fields.chunk` holding `chunk` with
// `data` as its bytes field, without copying `data`. `message` must not set
// the chunk field itself, nor `chunk` its data field (they would be merged
// on the receiving side).
grpc::ByteBuffer SerializeChunkMessage(
    const google::protobuf::MessageLite& message,
    const google::protobuf::MessageLite& chunk, const ChunkFields& fields,
    grpc::Slice data);

// Parses what SerializeChunkMessage (or any protobuf encoder) produced into
// `message`, whose chunk then has an empty data field, and `data`, which
// shares the received slices instead of copying them. Fails with
// InvalidArgument on malformed input, leaving `message` and `data` in an
// unspecified state.
absl::Status ParseChunkMessage(const grpc::ByteBuffer& buffer,
                               const ChunkFields& fields,
                               google::protobuf::MessageLite* message,
                               absl::Cord* data);

// The same two for messages without tensor bytes (requests, responses of
// the calls that carry chunks in the other direction).
grpc::ByteBuffer SerializeMessage(const google::protobuf::MessageLite& message);
absl::Status ParseMessage(const grpc::ByteBuffer& buffer,
                          google::protobuf::MessageLite* message);

// A slice that owns `bytes`: moved, not copied.
grpc::Slice OwnedSlice(std::string bytes);

// A slice over `values` that keeps `owner` (whatever owns their memory)
// alive until gRPC releases it: the memory itself on a little-endian host,
// else an owned encoded copy. The values must not change meanwhile.
grpc::Slice SharedFloatsSlice(std::shared_ptr<const void> owner,
                              absl::Span<const float> values);

// Lends memory to gRPC slices and knows when all of it is back.
//
// A slice from LendFloats points at the caller's memory; gRPC drops its
// reference some time after the message was written, possibly on another
// thread. The memory must stay valid and unchanged until then: the
// destructor waits for every slice, so a lender declared after the memory
// it lends (destroyed first) keeps that promise.
//
// Thread-safe.
class SliceLender {
 public:
  SliceLender() = default;
  SliceLender(const SliceLender&) = delete;
  SliceLender& operator=(const SliceLender&) = delete;
  ~SliceLender();

  // A slice over `values` encoded as tensor_codec encodes floats: the
  // memory itself on a little-endian host, else an owned encoded copy.
  grpc::Slice LendFloats(absl::Span<const float> values);

  // Blocks until gRPC has released every slice lent so far.
  void AwaitReturned();

 private:
  // Shared with every lent slice, so that a slice returned while the
  // lender is being destroyed still has a mutex to unlock.
  struct Ledger {
    absl::Mutex mu;
    int64_t outstanding ABSL_GUARDED_BY(mu) = 0;
  };

  const std::shared_ptr<Ledger> ledger_ = std::make_shared<Ledger>();
};

}  // namespace ps

#endif  // PS_COMMON_CHUNK_WIRE_H_
