#ifndef PS_CLIENT_LOCAL_CHANNEL_H_
#define PS_CLIENT_LOCAL_CHANNEL_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/client_stream.h"
#include "common/local_socket.h"

namespace ps::client_internal {

class LocalCall;

// How long a new frame connection may take, so that a port that drops
// packets (a firewall) costs a bounded wait before gRPC, never the job.
struct FrameTimeouts {
  // To connect over TCP (the Unix socket answers at once or not at all).
  absl::Duration connect = absl::Seconds(5);
  // For the shard's welcome once connected.
  absl::Duration handshake = absl::Seconds(10);
};

// The frame route to one shard (common/local_socket.h): connections to its
// abstract socket, each checked to lead to a process of this user, or, where
// that socket cannot be reached (the shard is on another host) and the shard
// serves frames over TCP, connections to its TCP port
// (common/tcp_frames.h); either admitted with the shard's secret and kept
// between calls. Once the Unix socket could not be reached, TCP alone is
// tried.
//
// Thread-safe. Calls hold a reference: a channel outlives its calls.
class LocalChannel : public std::enable_shared_from_this<LocalChannel> {
 public:
  // `max_message_bytes`: the largest message a call accepts from the shard.
  // `tcp_host`:`tcp_port`: where the shard serves frames over TCP (port 0:
  // it does not).
  LocalChannel(std::string socket_name, std::string secret,
               size_t max_message_bytes, std::string tcp_host = "",
               int tcp_port = 0, FrameTimeouts timeouts = {});

  const std::string& socket_name() const { return socket_name_; }
  const std::string& secret() const { return secret_; }
  int tcp_port() const { return tcp_port_; }
  // Whether new connections go over TCP: the Unix socket could not be
  // reached and the shard serves TCP.
  bool uses_tcp() const { return unix_unreachable_.load() && tcp_port_ > 0; }
  // Whether a connection was ever welcomed: the route worked once.
  bool has_worked() const { return worked_.load(); }

  // A call of `method` ("/package.Service/Method") on a kept connection or
  // a new one. UNAVAILABLE if no connection can be made; the shard's
  // refusal (PERMISSION_DENIED, UNAUTHENTICATED, RESOURCE_EXHAUSTED) as it
  // says it.
  absl::StatusOr<std::unique_ptr<LocalCall>> StartCall(absl::string_view method)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class LocalCall;

  absl::StatusOr<std::unique_ptr<LocalSocket>> Connect();
  // Presents the secret on a new connection and awaits the welcome.
  absl::Status Handshake(LocalSocket& socket) const;
  // "local socket NAME" or "TCP HOST:PORT", as errors name the route.
  std::string RouteName(bool tcp) const;
  // Keeps a connection whose last call ended cleanly.
  void Keep(std::unique_ptr<LocalSocket> socket) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string socket_name_;
  const std::string secret_;
  const size_t max_message_bytes_;
  const std::string tcp_host_;
  const int tcp_port_;
  const FrameTimeouts timeouts_;
  std::atomic<bool> unix_unreachable_{false};
  std::atomic<bool> worked_{false};
  absl::Mutex mu_;
  std::vector<std::unique_ptr<LocalSocket>> idle_ ABSL_GUARDED_BY(mu_);
};

// One call over a LocalChannel connection. A failure of the connection is
// the call's UNAVAILABLE status, which callers retry as any other.
//
// Messages are gathered (LocalSocket::QueueMessage) and leave at the latest
// with WritesDone, or with the first Read: the memory of a written message
// must stay unchanged until then.
//
// Not thread-safe: one thread drives a call.
class LocalCall final : public ClientStream {
 public:
  ~LocalCall() override;

  bool Write(const grpc::ByteBuffer& message) override;
  bool WriteLast(const grpc::ByteBuffer& message) override;
  bool WritesDone() override;
  bool Read(grpc::ByteBuffer* message) override;
  grpc::Status Finish() override;

 private:
  friend class LocalChannel;

  LocalCall(std::shared_ptr<LocalChannel> channel,
            std::unique_ptr<LocalSocket> socket, absl::string_view method);

  // Sends what is queued; false (and broken) on failure.
  bool Flush();
  void Break(const absl::Status& why);

  const std::shared_ptr<LocalChannel> channel_;
  // Null once given back to the channel.
  std::unique_ptr<LocalSocket> socket_;
  bool writes_done_ = false;
  // The shard's status, once its kStatus frame arrived.
  bool has_status_ = false;
  grpc::Status status_;
  // A failure of the connection: the call's status, and the connection is
  // not kept.
  bool broken_ = false;
  bool finished_ = false;
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_LOCAL_CHANNEL_H_
