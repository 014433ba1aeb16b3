#ifndef PS_CLIENT_PUSH_STREAM_H_
#define PS_CLIENT_PUSH_STREAM_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "client/parameter_client.h"
#include "client/shard_channel.h"
#include "common/chunk_wire.h"
#include "common/client_stream.h"
#include "common/partition.h"
#include "common/wire_encoding.h"
#include "proto/parameter_server.pb.h"

namespace ps::client_internal {

// What a push carries, and so which method it calls.
enum class PushKind {
  // A step's gradients (Push).
  kStep,
  // A step's gradients, then the weights for step + 1 on the same call
  // (PushPull): a StepPush started with pull_after.
  kStepPullAfter,
  // Rank 0's values of the tensors declared kFromRank0 (Push, with
  // PushRequest.initial_values).
  kInitialValues,
};

// One slice to send; its elements are at tensor_data + slice.offset.
struct PushItem {
  Slice slice;
  const float* tensor_data = nullptr;
  // How the values are written (kTopK: those that are not 0).
  WireEncoding encoding = WireEncoding::kFloat32;
};

// One shard's part of a push: the slices it holds, written as chunk
// messages into one call as they are queued, and retried from the first
// slice while the shard is unavailable. ThreadedPushStream (gRPC) and
// InlinePushStream (the same-host transport) are the two kinds.
//
// One thread drives a stream. The memory of a queued slice must stay valid
// and unchanged until Join returns or the stream is destroyed; destroyed
// before its Join, a stream is cancelled (the shard applies nothing) and
// waits until the transport has let go of that memory.
class PushStream {
 public:
  virtual ~PushStream() = default;

  // Queues one slice the shard holds.
  virtual void Enqueue(const PushItem& item) = 0;

  // No more slices: the shard may take the push. A pull_after push's
  // weights will go to `*weights` (shaped by ShapeWeights). A shard's answer
  // may wait (sync) for other ranks, whose pushes to the next shards may
  // wait for this rank's: close every shard's stream before joining any.
  virtual void Close(TensorValues* weights) = 0;

  // After Close: waits for the shard's answer. OK if it took the push (and,
  // pull_after, sent every weight it holds).
  virtual absl::Status Join() = 0;

  // After a successful Join of a pull_after push: the version the shard's
  // weights were at.
  virtual uint64_t pulled_version() const = 0;
};

// Who a PushStream sends to, and what.
struct PushStreamSpec {
  // Both outlive the stream.
  ShardCalls* shard = nullptr;
  const Partition* partition = nullptr;
  int server = 0;
  StepInfo info;
  PushKind kind = PushKind::kStep;
  uint64_t chunk_elements = 1;
  // kStepPullAfter: how each tensor's weights come back, by id (empty:
  // float32).
  std::vector<WireEncoding> pull_encodings;
};

// What both kinds of PushStream share: the calls to the shard, the
// messages they carry, and the answer they end with.
//
// Not thread-safe: one thread at a time.
class PushCalls {
 public:
  explicit PushCalls(const PushStreamSpec& spec);
  PushCalls(const PushCalls&) = delete;
  PushCalls& operator=(const PushCalls&) = delete;

  // A new call of the push's method.
  std::unique_ptr<ClientStream> Open();

  // Writes one slice as chunks of at most chunk_elements, each pointing at
  // the gradient memory; false once the stream is broken.
  bool Write(const PushItem& item, ClientStream& call);

  // Ends a call whose slices are all written (`broken`: a write failed,
  // which the call's status says): the shard's acknowledgement, or for a
  // pull_after push the weights it sends, into `*weights`.
  absl::Status Complete(ClientStream& call, bool broken, TensorValues* weights);

  // Runs `attempt` with the shard's retry, then waits until the transport
  // has let go of the gradient memory.
  absl::Status RunWithRetry(const std::function<absl::Status()>& attempt);

  // Waits until the transport has let go of the gradient memory.
  void AwaitReturned() { lender_.AwaitReturned(); }

  uint64_t pulled_version() const { return pulled_version_; }

 private:
  const PushStreamSpec spec_;
  // Every field but the chunk, the same in each message.
  proto::PushRequest prototype_;
  SliceLender lender_;
  uint64_t pulled_version_ = 0;
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_PUSH_STREAM_H_
