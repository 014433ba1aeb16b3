#ifndef PS_CLIENT_SHARD_FANOUT_H_
#define PS_CLIENT_SHARD_FANOUT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/local_channel.h"
#include "client/parameter_client.h"
#include "client/thread_cache.h"
#include "common/byte_stream_call.h"
#include "common/client_stream.h"
#include "common/partition.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps::client_internal {

// Connects a channel to every shard of `options.servers`, with the
// credentials the options ask for (client/channel_auth.h), waiting up to
// `options.connect_timeout` in all. InvalidArgument for bad authentication
// options; Unavailable naming the first shard that did not answer, with
// gRPC's last connection error and a hint.
absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> ConnectChannels(
    const ClientOptions& options);

class PushSession;

// The gRPC side of ps::ParameterClient: one declared model's calls to every
// parameter-server shard.
//
// Every call fans out to the shards in parallel, one stream each, and fails
// if any shard fails (with the shard's address in the message). A shard that
// is unreachable or not ready is retried with backoff for up to
// `retry_timeout`, so a worker rides out a shard's restart; pushes are safe
// to repeat because shards recognise a batch they have already applied. The
// client validates everything the shards send against the partition, so a
// buggy or mismatched shard yields an error rather than wrong weights.
//
// A shard on this host that announces a same-host endpoint (ps.proto
// LocalEndpoint, in its Register and Heartbeat answers) is reached there
// for Pull, Push and PushPull, unless options.local_transport is off; if
// the endpoint cannot be reached, the client says so once and goes on
// through gRPC until the shard announces another. A push session drives
// its same-host streams from the caller's thread: the messages leave as
// Send queues them, with no thread in between.
//
// Thread-safe: calls may come from several threads, but a worker normally
// issues one at a time. Shares the channels; the partition must outlive it.
// Reads rank, job_id, chunk_elements and the retry durations of the
// options. Between calls, heartbeats (StartHeartbeats) tell the shards that
// the rank is alive and which steps it has done.
class ShardFanout {
 public:
  // `channels[i]` (from ConnectChannels) reaches shard i at `addresses[i]`.
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

  // Opens a push for one step; see PushSession.
  std::unique_ptr<PushSession> StartPush(const StepInfo& info);

  // Opens a push for one step that also brings back the weights for clock
  // `info.step + 1`, as Pull would once the shards allow it: one call per
  // shard and step instead of two (ps.proto PushPull). Ends with
  // PushSession::FinishWithPull.
  std::unique_ptr<PushSession> StartPushPull(const StepInfo& info);

  // Pushes complete gradients (`gradients[tensor_id]`) in one call.
  absl::Status Push(const StepInfo& info, const TensorValues& gradients);

  // This rank's `generation`-th barrier, on shard 0 (ps.proto Barrier).
  absl::Status Barrier(uint64_t generation);

  // Tells every shard this worker has finished.
  absl::Status Done();

  // Starts a thread that sends every shard a heartbeat each `period` (with
  // the clock of the last answered pull) until the fanout is destroyed.
  // Failures are only logged: a shard that misses heartbeats says so
  // itself. Once, after Register.
  void StartHeartbeats(absl::Duration period);

  const Partition& partition() const { return *partition_; }
  int num_servers() const { return static_cast<int>(stubs_.size()); }
  const std::string& address(int server) const { return addresses_[server]; }

 private:
  friend class PushSession;

  ShardFanout(std::vector<std::string> addresses, const Partition* partition,
              const ClientOptions& options);

  proto::RequestHeader Header(int server) const;
  // Sizes `weights` like the model's tensors.
  void ShapeWeights(TensorValues& weights) const;
  // Runs `attempt` until it succeeds, fails with an error other than
  // UNAVAILABLE, or has failed UNAVAILABLE for `retry_timeout` (counted from
  // the first such failure: a pull may wait long for other ranks before
  // its shard goes down); annotates failures with the shard's address.
  absl::Status CallWithRetry(int server, absl::string_view what,
                             const std::function<absl::Status()>& attempt);
  // Pull and PullFinal.
  absl::StatusOr<uint64_t> PullFromAll(uint64_t clock, bool after_others_finish,
                                       TensorValues& weights);
  absl::Status PullFromServer(int server, uint64_t clock,
                              bool after_others_finish, TensorValues& weights,
                              uint64_t* version);
  // Reads a pull's answer from `server` on `call` into `weights` (shaped),
  // checking every chunk against the partition, and finishes the call.
  absl::Status ReceiveWeights(int server, ClientStream& call,
                              TensorValues& weights, uint64_t* version);
  // A call of `method` ("Pull", ...) to `server`: over its same-host
  // channel if it has one that connects, else over gRPC.
  std::unique_ptr<ClientStream> OpenStream(int server, absl::string_view method)
      ABSL_LOCKS_EXCLUDED(local_mu_);
  // The shard's same-host channel; null if it has none.
  std::shared_ptr<LocalChannel> LocalChannelOf(int server) const
      ABSL_LOCKS_EXCLUDED(local_mu_);
  // Takes the endpoint a shard announced (an empty one changes nothing).
  void LearnLocalEndpoint(int server, const proto::LocalEndpoint& endpoint)
      ABSL_LOCKS_EXCLUDED(local_mu_);
  // Prefixes the shard's address to a failed status.
  absl::Status Annotate(int server, const absl::Status& status) const;
  // The rank has done steps [0, clock) on every shard.
  void RaiseClock(uint64_t clock);
  void SendHeartbeats(absl::Duration period);

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
  // Sent in heartbeats: a shard restarted since the rank's last push to it
  // learns that the rank will not send the pushes it lost.
  std::atomic<uint64_t> clock_{0};

  // By shard: the same-host channel, and the name of the last endpoint
  // that could not be reached (not tried again).
  mutable absl::Mutex local_mu_;
  std::vector<std::shared_ptr<LocalChannel>> local_channels_
      ABSL_GUARDED_BY(local_mu_);
  std::vector<std::string> unreachable_local_ ABSL_GUARDED_BY(local_mu_);

  absl::Mutex heartbeat_mu_;
  bool stopping_ ABSL_GUARDED_BY(heartbeat_mu_) = false;
  std::thread heartbeat_thread_;
  // Runs the fan-out to the shards and each push's streams; kept for the
  // next step.
  ThreadCache threads_;
};

// One step's push: a stream to every shard involved, fed tensor by tensor as
// the gradients become ready, so that sending the last layer's gradient
// overlaps computing the earlier layers'. Finish() closes the streams and
// waits for every shard's answer (FinishWithPull, of a session from
// StartPushPull: for the weights each shard sends once it took the push); a
// shard commits the push only if its stream covered all its elements, so a
// session that did not send every tensor applies nothing. A session
// destroyed before its Finish cancels its streams.
//
// Send() may be called from one thread while the session's own threads
// stream, but not at the same time as Finish or FinishWithPull; the
// gradient memory passed to Send must stay valid and unchanged until Finish
// (or FinishWithPull, or the destructor) returns.
class PushSession {
 public:
  ~PushSession();
  PushSession(const PushSession&) = delete;
  PushSession& operator=(const PushSession&) = delete;

  // Queues every slice of `tensor_id` to the shard that owns it. Fails (and
  // sends nothing) if the tensor id or the gradient's size is wrong, or the
  // session does not carry that tensor.
  absl::Status Send(uint32_t tensor_id, absl::Span<const float> gradient);

  // Waits for every shard; OK only if every shard accepted the push. For a
  // session from StartPush.
  absl::Status Finish();

  // For a session from StartPushPull: waits for every shard to take the
  // push and send the weights for clock step + 1 into `weights[tensor_id]`
  // (resized as needed). Returns the smallest version the shards reported.
  // On error the weights are unspecified (the push may have been taken:
  // repeating the step is safe, the shards recognise the batch).
  absl::StatusOr<uint64_t> FinishWithPull(TensorValues& weights);

 private:
  friend class ShardFanout;
  class ShardStream;

  // What the session's messages are.
  enum class Kind { kPush, kPushPull, kInitialValues };

  // Streams to the shards `servers[s]` says; every shard if empty.
  PushSession(ShardFanout* fanout, const StepInfo& info, Kind kind,
              const std::vector<bool>& servers = {});

  // Closes every stream and waits for it; a PushPull's answer goes to
  // `weights`, each shard's version to `(*pulled_versions)[shard]`.
  absl::Status JoinStreams(TensorValues* weights,
                           std::vector<uint64_t>* pulled_versions = nullptr);

  ShardFanout* const fanout_;
  const Kind kind_;
  const uint64_t step_;
  // By shard; null for a shard the session does not reach.
  std::vector<std::unique_ptr<ShardStream>> streams_;
  bool finished_ = false;
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_SHARD_FANOUT_H_
