#ifndef PS_CLIENT_PULL_READER_H_
#define PS_CLIENT_PULL_READER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "client/parameter_client.h"
#include "common/client_stream.h"
#include "common/partition.h"
#include "common/wire_encoding.h"
#include "grpcpp/support/byte_buffer.h"
#include "proto/parameter_server.pb.h"

namespace ps::client_internal {

// Sizes `weights` like `model`'s tensors, as a PullReader needs them.
void ShapeWeights(const ModelSpec& model, TensorValues& weights);

// Fills a request's per-tensor pull encodings (ps.proto
// PullRequest.tensor_encodings) from `encodings`, by tensor id: up to the
// last that is not float32, so that an all-float32 pull stays as it was on
// the wire.
void AddPullEncodings(absl::Span<const WireEncoding> encodings,
                      google::protobuf::RepeatedField<int>* out);

// Reads one shard's answer to a pull (ps.proto PullResponse messages, to
// Pull, or to PushPull after the push) into the weights, checking every
// chunk against what the partition gives the shard: the chunks must come
// slice by slice, in the partition's order, each continuing where the
// previous one ended (then exact coverage is a matter of counting), with
// the model's shape, float32 values in the encoding the pull asked for
// (`encodings` by tensor id; empty: float32) and as many bytes as that
// encoding gives the chunk's elements. A buggy or
// mismatched shard yields an error, never weights left unwritten.
//
// Not thread-safe. Borrows the partition and the weights.
class PullReader {
 public:
  // `weights` shaped by ShapeWeights; the elements of the shard's slices
  // are written as chunks arrive (unspecified after an error).
  PullReader(const Partition& partition, int server, TensorValues& weights,
             absl::Span<const WireEncoding> encodings = {});

  // Takes the shard's next message. After the first error, ignores the
  // rest (the stream is drained before its status is read).
  void Add(const grpc::ByteBuffer& message);

  // OK once every message was right and every slice covered; DataLoss (or
  // InvalidArgument, for chunk bytes that do not match its element count)
  // naming what was wrong.
  absl::Status Finish() const;

  // The version of the first message, if it parsed.
  std::optional<uint64_t> version() const { return version_; }

 private:
  const ModelSpec& model_;
  const std::vector<Slice>& slices_;
  TensorValues& weights_;
  const absl::Span<const WireEncoding> encodings_;
  size_t slice_index_ = 0;
  uint64_t next_offset_ = 0;
  absl::Status error_;
  std::optional<uint64_t> version_;
  // Reused across messages.
  proto::PullResponse response_;
};

// Reads `call` to its end through a PullReader for `server`, then finishes
// it: the call's failure if it failed, else the reader's verdict. Sets
// `*version` to the first message's version, if one parsed.
absl::Status ReceiveWeights(ClientStream& call, const Partition& partition,
                            int server, TensorValues& weights,
                            uint64_t* version,
                            absl::Span<const WireEncoding> encodings = {});

}  // namespace ps::client_internal

#endif  // PS_CLIENT_PULL_READER_H_
