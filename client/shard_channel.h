#ifndef PS_CLIENT_SHARD_CHANNEL_H_
#define PS_CLIENT_SHARD_CHANNEL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "client/local_channel.h"
#include "client/parameter_client.h"
#include "client/retry.h"
#include "common/client_stream.h"
#include "grpcpp/channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/parameter_server.grpc.pb.h"

namespace ps::client_internal {

// What a pull or push stream needs of its shard: ShardChannel, or a test's
// fake.
class ShardCalls {
 public:
  virtual ~ShardCalls() = default;

  // The header every request to the shard carries.
  virtual proto::RequestHeader Header() const = 0;
  // A new call of `method` ("Pull", "Push", "PushPull").
  virtual std::unique_ptr<ClientStream> OpenStream(
      absl::string_view method) = 0;
  // Runs `attempt` as RetryWhileUnavailable does; a failure says which
  // shard failed.
  virtual absl::Status CallWithRetry(
      absl::string_view what,
      const std::function<absl::Status()>& attempt) const = 0;
};

// One shard as this client reaches it: the gRPC stubs on its channel, the
// frame channel it announced (ps.proto LocalEndpoint, in its Register and
// Heartbeat answers: its Unix socket, used on its host, and its TCP port,
// used from elsewhere, at the host of its gRPC address) unless
// options.local_transport is off, and the header of each request. A client
// that speaks TLS to the shard never sends frames over TCP, which are not
// encrypted.
//
// A frame endpoint that cannot be reached (within FrameTimeouts: a port
// that drops packets costs a bounded wait) is warned about once and not
// tried again; the shard is then reached through gRPC until it announces
// another. An endpoint that worked before is kept through one failed
// attempt to connect (its call fails UNAVAILABLE, which the caller retries
// over frames again) and given up at the second in a row.
//
// Thread-safe. Shares the gRPC channel.
class ShardChannel final : public ShardCalls {
 public:
  // Shard `index` of the partition with `partition_fingerprint`, at
  // `address`. Reads rank, job_id, local_transport and the retry fields of
  // `options`.
  ShardChannel(int index, std::string address,
               const std::shared_ptr<grpc::Channel>& channel,
               uint64_t partition_fingerprint, const ClientOptions& options,
               FrameTimeouts frame_timeouts = {});

  int index() const { return index_; }
  const std::string& address() const { return address_; }
  // The generated stub, for the calls without tensor bytes.
  proto::ParameterServer::Stub& stub() const { return *stub_; }

  // This client's incarnation, sent in every header from now on so that a
  // shard can refuse a process that a restarted worker of the same rank
  // replaced; 0 (not given) until set.
  void set_incarnation(uint64_t incarnation) { incarnation_ = incarnation; }
  uint64_t incarnation() const { return incarnation_; }

  proto::RequestHeader Header() const override;

  // Over the same-host channel if the shard has one that connects, else
  // over gRPC through a GenericStub: Pull and Push, whose messages carry
  // tensor bytes, are serialized without copies (common/chunk_wire.h).
  std::unique_ptr<ClientStream> OpenStream(absl::string_view method) override
      ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status CallWithRetry(
      absl::string_view what,
      const std::function<absl::Status()>& attempt) const override;

  // Prefixes "server I (ADDRESS): " to a failed status.
  absl::Status Annotate(const absl::Status& status) const;

  // Whether the shard has a frame channel (not yet found unreachable), and
  // whether that channel goes over TCP (its Unix socket was not reachable).
  bool HasLocalChannel() const ABSL_LOCKS_EXCLUDED(mu_);
  bool UsesTcpFrames() const ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the endpoint the shard announced; an empty one, one found
  // unreachable before, or any with local_transport off changes nothing.
  void LearnLocalEndpoint(const proto::LocalEndpoint& endpoint)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int index_;
  const std::string address_;
  // "server I (ADDRESS)", as failures and warnings name the shard.
  const std::string name_;
  const uint64_t partition_fingerprint_;
  const int rank_;
  const std::string job_id_;
  const bool local_transport_;
  // Whether the shard's TCP frame port may be used: not with TLS.
  const bool tcp_frames_;
  const RetryPolicy retry_;
  const FrameTimeouts frame_timeouts_;
  const std::unique_ptr<proto::ParameterServer::Stub> stub_;
  const std::unique_ptr<grpc::GenericStub> byte_stub_;
  std::atomic<uint64_t> incarnation_{0};

  mutable absl::Mutex mu_;
  std::shared_ptr<LocalChannel> local_channel_ ABSL_GUARDED_BY(mu_);
  // Whether the last attempt to start a call on local_channel_, which had
  // worked before, failed: the next failure gives it up.
  bool local_failed_once_ ABSL_GUARDED_BY(mu_) = false;
  // The socket name of the last endpoint that could not be reached.
  std::string unreachable_local_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_SHARD_CHANNEL_H_
