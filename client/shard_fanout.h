#ifndef PS_CLIENT_SHARD_FANOUT_H_
#define PS_CLIENT_SHARD_FANOUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/heartbeats.h"
#include "client/parameter_client.h"
#include "client/push_stream.h"
#include "client/shard_channel.h"
#include "client/tensor_compression.h"
#include "client/thread_cache.h"
#include "common/partition.h"
#include "grpcpp/channel.h"

namespace ps::client_internal {

// The gRPC side of ps::ParameterClient: one declared model's calls to every
// parameter-server shard.
//
// Every call fans out to the shards in parallel, one call each, and fails
// if any shard fails (with the shard's address in the message). A shard
// that is unreachable or not ready is retried with backoff for up to
// `retry_timeout` (client/retry.h), so a worker rides out a shard's
// restart. The client validates everything the shards send against the
// partition (client/pull_reader.h), so a buggy or mismatched shard yields
// an error rather than wrong weights.
//
// A shard on this host that announces a same-host endpoint is reached
// there for Pull and pushes (client/shard_channel.h). A push's streams to
// such shards are driven from the caller's thread (InlinePushStream), the
// others each from a thread of the fanout's (ThreadedPushStream), as are
// large pushes to several shards over TCP frames (OwnThreadForFrames).
//
// Thread-safe: calls may come from several threads, but a worker normally
// issues one at a time. Shares the channels; the partition must outlive it,
// and it must outlive the pushes it starts. Between calls, heartbeats
// (StartHeartbeats) tell the shards that the rank is alive and which steps
// it has done.
class ShardFanout {
 public:
  // `channels[i]` (from ConnectChannels) reaches shard i at `addresses[i]`.
  // Reads rank, job_id, chunk_elements, local_transport, compression and
  // the retry fields of `options`.
  static absl::StatusOr<std::unique_ptr<ShardFanout>> Create(
      std::vector<std::string> addresses,
      std::vector<std::shared_ptr<grpc::Channel>> channels,
      const Partition* partition, const ClientOptions& options);

  // Stops the heartbeats.
  ~ShardFanout();
  ShardFanout(const ShardFanout&) = delete;
  ShardFanout& operator=(const ShardFanout&) = delete;

  // Declares the partition's model to every shard and registers; the shards
  // must agree on mode and worker count. Resume fields are the most
  // conservative over the shards: the smallest data progress, so no example
  // is skipped.
  absl::StatusOr<Registration> Register(uint64_t incarnation,
                                        uint64_t planned_steps,
                                        uint32_t max_examples_per_push);

  // Sends `values[id]` of every tensor declared kFromRank0 to the shards
  // that hold part of one (ps.proto PushRequest.initial_values); the others
  // get no call. OK at once if the model has no such tensor.
  absl::Status UploadInitialValues(const TensorValues& values);

  // Fetches every tensor into `weights[tensor_id]` (resized as needed) once
  // the shards allow clock `clock` to proceed. Returns the smallest version
  // the shards reported.
  absl::StatusOr<uint64_t> Pull(uint64_t clock, TensorValues& weights);
  // Pull for a worker that has trained its last step: the shards answer
  // once every other worker has finished too (done, making this pull, or
  // dead past the shards' --rejoin_grace), so the weights hold every
  // worker's last update (ps.proto PullRequest.after_others_finish).
  absl::StatusOr<uint64_t> PullFinal(uint64_t clock, TensorValues& weights);

  // Opens step `info.step`'s push (client/sharded_step_push.h); with
  // `pull_after` it also brings back the weights for step + 1, as Pull
  // would once the shards allow it: one call per shard and step instead of
  // two (ps.proto PushPull).
  std::unique_ptr<StepPush> StartStep(const StepInfo& info, bool pull_after);

  // This rank's `generation`-th barrier, on shard 0 (ps.proto Barrier).
  absl::Status Barrier(uint64_t generation);

  // Tells every shard this worker has finished.
  absl::Status Done();

  // Starts heartbeats to every shard each `period` (with the clock of the
  // last answered pull) until the fanout is destroyed. Once, after
  // Register.
  void StartHeartbeats(absl::Duration period);

  // ParameterClient::SetCompression.
  absl::Status SetCompression(int id, const Compression& compression) {
    return compression_.Set(id, compression);
  }

  const Partition& partition() const { return *partition_; }
  int num_servers() const { return static_cast<int>(shards_.size()); }

 private:
  ShardFanout(std::vector<std::unique_ptr<ShardChannel>> shards,
              const Partition* partition, uint64_t chunk_elements,
              const Compression& compression);

  // How each tensor's weights are pulled now, by id.
  std::vector<WireEncoding> PullEncodings() const;

  // A shard's push of at least this many bytes over TCP frames, in a push
  // to several shards, is driven from a thread of its own
  // (bench/README.md, "Where a frames round goes").
  static constexpr uint64_t kOwnThreadFramesBytes = 256 << 10;

  // Whether the push stream to `shard` (index `server`), reached over frames,
  // runs on a thread of its own rather than the caller's: over TCP, in a
  // push to several shards, with kOwnThreadFramesBytes or more for it. The
  // caller's thread would read one shard's answer while another's waited.
  bool OwnThreadForFrames(const ShardChannel& shard, int server) const;
  // A push of `kind` over every shard it reaches.
  std::unique_ptr<StepPush> StartPush(const StepInfo& info, PushKind kind);
  // Pull and PullFinal.
  absl::StatusOr<uint64_t> PullFromAll(uint64_t clock, bool after_others_finish,
                                       TensorValues& weights);
  absl::Status PullFromShard(ShardChannel& shard, uint64_t clock,
                             bool after_others_finish,
                             absl::Span<const WireEncoding> encodings,
                             TensorValues& weights, uint64_t* version);

  const std::vector<std::unique_ptr<ShardChannel>> shards_;
  const Partition* const partition_;
  const uint64_t chunk_elements_;
  TensorCompression compression_;
  // Borrows `shards_`; declared after them, so stopped first.
  Heartbeats heartbeats_;
  // Runs the fan-out to the shards and the threaded push streams; kept for
  // the next step.
  ThreadCache threads_;
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_SHARD_FANOUT_H_
