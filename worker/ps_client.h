#ifndef PS_WORKER_PS_CLIENT_H_
#define PS_WORKER_PS_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/byte_stream_call.h"
#include "common/partition.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps::worker {

struct ClientOptions {
  int rank = 0;
  // The job the servers must belong to (their --job_id).
  std::string job_id;
  // Elements per streamed chunk: 256K floats = 1 MiB; 4 MiB chunks measured
  // no faster here (bench/README.md).
  uint64_t chunk_elements = 256 * 1024;
  // How long Connect waits for every shard to accept a connection.
  absl::Duration connect_timeout = absl::Seconds(30);
  // A shard that is unreachable (down, restarting) is retried with
  // exponential backoff from `initial_backoff` to `max_backoff` for this
  // long before the call fails.
  absl::Duration retry_timeout = absl::Seconds(120);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // Period of the heartbeats that tell the shards this worker is alive.
  absl::Duration heartbeat_period = absl::Seconds(1);
};

// What the shards told a registering worker.
struct RegisterInfo {
  std::string mode;
  int num_workers = 0;
  uint64_t version = 0;
  uint64_t next_step = 0;
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
};

// What a push says about the gradient besides its values.
struct PushMetadata {
  uint64_t step = 0;
  uint64_t base_version = 0;
  uint32_t num_examples = 0;
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
};

class PushSession;

// A worker's connection to every parameter-server shard.
//
// Every call fans out to the shards in parallel, one stream each, and fails
// if any shard fails (with the shard's address in the message). A shard that
// is unreachable is retried with backoff for up to `retry_timeout`, so a
// worker rides out a shard's restart; pushes are safe to repeat because
// shards recognise a batch they have already applied. The client validates
// everything the shards send against the partition, so a buggy or
// mismatched shard yields an error rather than wrong weights.
//
// Thread-safe: calls may come from several threads, but a worker normally
// issues one at a time. Owns its channels; the partition must outlive it.
class ParameterClient {
 public:
  // `addresses[i]` is the address of shard i ("host:port").
  static absl::StatusOr<std::unique_ptr<ParameterClient>> Connect(
      const std::vector<std::string>& addresses, const Partition* partition,
      const ClientOptions& options);

  ~ParameterClient();

  // Registers with every shard; they must agree on mode and worker count.
  // Resume fields are the most conservative over the shards: the smallest
  // data progress, so no example is skipped.
  absl::StatusOr<RegisterInfo> Register(uint64_t incarnation,
                                        uint64_t planned_steps);

  // Starts a thread that sends a heartbeat to every shard each
  // `heartbeat_period` until the client is destroyed. Failures are only
  // logged: a shard that misses heartbeats will say so itself.
  void StartHeartbeats(uint64_t incarnation);

  // Fetches every tensor into `weights[tensor_id]` (resized as needed) once
  // the shards allow clock `clock` to proceed. Returns the smallest version
  // the shards reported.
  absl::StatusOr<uint64_t> Pull(uint64_t clock,
                                std::vector<std::vector<float>>& weights);
  // Pull for a worker that has trained its last step: the shards answer
  // once every other worker has finished too (done, making this pull, or
  // dead past the shards' --rejoin_grace), so the weights hold every
  // worker's last update (ps.proto PullRequest.after_others_finish).
  absl::StatusOr<uint64_t> PullFinal(uint64_t clock,
                                     std::vector<std::vector<float>>& weights);

  // Opens a push for one step; see PushSession.
  std::unique_ptr<PushSession> StartPush(const PushMetadata& metadata);

  // Opens a push for one step that also brings back the weights for clock
  // `metadata.step + 1`, as Pull would once the shards allow it: one call
  // per shard and step instead of two (ps.proto PushPull). Ends with
  // PushSession::FinishWithPull.
  std::unique_ptr<PushSession> StartPushPull(const PushMetadata& metadata);

  // Pushes complete gradients (`gradients[tensor_id]`) in one call.
  absl::Status Push(const PushMetadata& metadata,
                    const std::vector<std::vector<float>>& gradients);

  // Tells every shard this worker has finished.
  absl::Status Done();

  const Partition& partition() const { return *partition_; }
  int num_servers() const { return static_cast<int>(stubs_.size()); }
  const std::string& address(int server) const { return addresses_[server]; }

 private:
  friend class PushSession;

  ParameterClient(std::vector<std::string> addresses,
                  const Partition* partition, const ClientOptions& options);

  proto::RequestHeader Header(int server) const;
  // Sizes `weights` like the model's tensors.
  void ShapeWeights(std::vector<std::vector<float>>& weights) const;
  // Runs `attempt` until it succeeds, fails with an error other than
  // UNAVAILABLE, or `retry_timeout` has passed; annotates failures with the
  // shard's address.
  absl::Status CallWithRetry(int server, absl::string_view what,
                             const std::function<absl::Status()>& attempt);
  void SendHeartbeats(uint64_t incarnation);
  // Pull and PullFinal.
  absl::StatusOr<uint64_t> PullFromAll(
      uint64_t clock, bool after_others_finish,
      std::vector<std::vector<float>>& weights);
  absl::Status PullFromServer(int server, uint64_t clock,
                              bool after_others_finish,
                              std::vector<std::vector<float>>& weights,
                              uint64_t* version);
  // Reads a pull's answer from `server` on `call` into `weights` (shaped),
  // checking every chunk against the partition, and finishes the call.
  absl::Status ReceiveWeights(int server, ByteStreamCall& call,
                              std::vector<std::vector<float>>& weights,
                              uint64_t* version);
  // Prefixes the shard's address to a failed status.
  absl::Status Annotate(int server, const absl::Status& status) const;

  const std::vector<std::string> addresses_;
  const Partition* const partition_;
  const ClientOptions options_;
  std::vector<std::unique_ptr<proto::ParameterServer::Stub>> stubs_;
  // Pull and Push, whose messages carry tensor bytes, go through these on
  // the same channels: common/chunk_wire.h serializes them without copies.
  std::vector<std::unique_ptr<grpc::GenericStub>> byte_stubs_;
  // Set by Register and sent in every header, so that a shard can refuse a
  // process that a restarted worker of the same rank replaced.
  std::atomic<uint64_t> incarnation_{0};

  absl::Mutex heartbeat_mu_;
  bool stopping_ ABSL_GUARDED_BY(heartbeat_mu_) = false;
  std::thread heartbeat_thread_;
};

// One step's push: a stream to every shard, fed tensor by tensor as the
// gradients become ready, so that sending the last layer's gradient overlaps
// computing the earlier layers'. Finish() closes the streams and waits for
// every shard's answer (FinishWithPull, of a session from StartPushPull:
// for the weights each shard sends once it took the push); a shard commits the
// push only if its stream covered all its elements, so a session that did not
// send every tensor applies nothing.
//
// Send() may be called from one thread while the session's own threads
// stream; the gradient memory passed to Send must stay valid and unchanged
// until Finish (or FinishWithPull) returns.
class PushSession {
 public:
  ~PushSession();
  PushSession(const PushSession&) = delete;
  PushSession& operator=(const PushSession&) = delete;

  // Queues every slice of `tensor_id` to the shard that owns it. Fails (and
  // sends nothing) if the tensor id or the gradient's size is wrong.
  absl::Status Send(uint32_t tensor_id, absl::Span<const float> gradient);

  // Waits for every shard; OK only if every shard accepted the push. For a
  // session from StartPush.
  absl::Status Finish();

  // For a session from StartPushPull: waits for every shard to take the
  // push and send the weights for clock step + 1 into `weights[tensor_id]`
  // (resized as needed). Returns the smallest version the shards reported.
  // On error the weights are unspecified (the push may have been taken:
  // repeating the step is safe, the shards recognise the batch).
  absl::StatusOr<uint64_t> FinishWithPull(
      std::vector<std::vector<float>>& weights);

 private:
  friend class ParameterClient;
  class ShardStream;

  PushSession(ParameterClient* client, const PushMetadata& metadata,
              bool pull_after_push);

  // Closes every stream and waits for it; a PushPull's answer goes to
  // `weights`, each shard's version to `(*pulled_versions)[shard]`.
  absl::Status JoinStreams(std::vector<std::vector<float>>* weights,
                           std::vector<uint64_t>* pulled_versions = nullptr);

  ParameterClient* const client_;
  const bool pull_after_push_;
  std::vector<std::unique_ptr<ShardStream>> streams_;
};

}  // namespace ps::worker

#endif  // PS_WORKER_PS_CLIENT_H_
