#ifndef PS_SERVER_LOCAL_STREAM_SERVER_H_
#define PS_SERVER_LOCAL_STREAM_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/local_socket.h"
#include "server/byte_stream.h"

namespace ps::server {

struct LocalStreamServerOptions {
  // Connections served at once (0: no bound); one beyond is refused with
  // RESOURCE_EXHAUSTED, and its client goes through gRPC instead.
  int max_connections = 0;
  // A connection whose peer sends or takes nothing for this long, within a
  // call or between calls, is closed (its call cancelled).
  absl::Duration idle_timeout = absl::InfiniteDuration();
  // How long a new connection may take to present the secret (or
  // idle_timeout, if shorter): until then it holds a thread and a place
  // among max_connections.
  absl::Duration hello_timeout = absl::Seconds(10);
  // Largest message a client may send.
  size_t max_message_bytes = 64 << 20;
  // Bytes of messages being received on all connections together (a frame
  // counts from its header until its last byte; at least max_message_bytes):
  // a message beyond breaks its connection, so that half-sent frames cannot
  // hold more memory than this.
  size_t max_receiving_bytes = 256 << 20;
  // Also serve the frames over TCP, to workers on other hosts, on this
  // host (an address or name; "0.0.0.0": every IPv4 interface) at
  // tcp_port (0: a free one). Empty: Unix only. Such connections are
  // admitted by the secret alone, and travel in clear (no TLS).
  std::string tcp_host;
  int tcp_port = 0;
};

// Serves `methods` to clients on this host over the same-host transport
// (common/local_socket.h): an abstract Unix socket of a fresh random name,
// admitting connections from processes of this server's user that present
// its secret; and, with options.tcp_host, the same frames over TCP to
// clients elsewhere that present the secret (common/tcp_frames.h). Name,
// port and secret reach clients through the gRPC port, which authenticates
// them as the server's flags say.
//
// Each connection has a thread of its own, which runs the handlers of the
// calls that come on it, one after the other: a message read by that
// thread goes to the handler without any hand-off.
//
// Thread-safe. Destroying it shuts it down at once.
class LocalStreamServer {
 public:
  // Listens; `methods` must outlive the server.
  static absl::StatusOr<std::unique_ptr<LocalStreamServer>> Start(
      const StreamMethods* methods, const LocalStreamServerOptions& options);
  ~LocalStreamServer();

  LocalStreamServer(const LocalStreamServer&) = delete;
  LocalStreamServer& operator=(const LocalStreamServer&) = delete;

  // Calls served so far, and connections admitted, over the Unix socket
  // and over TCP.
  int64_t calls() const { return calls_[kUnix].load(); }
  int64_t connections() const { return connections_admitted_[kUnix].load(); }
  int64_t tcp_calls() const { return calls_[kTcp].load(); }
  int64_t tcp_connections() const { return connections_admitted_[kTcp].load(); }
  // Bytes of the messages being received now (max_receiving_bytes).
  size_t receiving_bytes() const { return receiving_bytes_.load(); }

  // The abstract socket's name and the secret a client presents.
  const std::string& socket_name() const { return socket_name_; }
  const std::string& secret() const { return secret_; }
  // The TCP port frames are served on; 0: none.
  int tcp_port() const { return tcp_port_; }

  // Stops taking connections and closes those between calls; calls still
  // running at `deadline` are cancelled. Returns once every handler has
  // returned. Idempotent.
  void Shutdown(absl::Time deadline = absl::InfinitePast())
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Indexes of the counts by route.
  static constexpr int kUnix = 0;
  static constexpr int kTcp = 1;

  struct Connection {
    std::unique_ptr<LocalSocket> socket;
    // Whether a handler runs for it: Shutdown lets such a call finish
    // until its deadline.
    bool in_call = false;
    bool ended = false;
    std::thread thread;
  };

  LocalStreamServer(const StreamMethods* methods,
                    const LocalStreamServerOptions& options,
                    std::unique_ptr<LocalListener> listener,
                    std::string socket_name, std::string secret);

  // Takes connections from `listener` until it is shut down.
  void AcceptLoop(LocalListener& listener) ABSL_LOCKS_EXCLUDED(mu_);
  // The thread of one connection.
  void Serve(Connection& connection) ABSL_LOCKS_EXCLUDED(mu_);
  // Checks who connected; sends the welcome or the refusal.
  bool Admit(LocalSocket& socket);
  // Runs one call whose kCall frame named `method`; false if the
  // connection cannot carry another call.
  bool ServeCall(LocalSocket& socket, absl::string_view method);
  // Joins the threads of ended connections.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StreamMethods* const methods_;
  const LocalStreamServerOptions options_;
  const std::unique_ptr<LocalListener> listener_;
  const std::string socket_name_;
  const std::string secret_;
  // Set by Start before the threads start; null and 0 without TCP.
  std::unique_ptr<LocalListener> tcp_listener_;
  int tcp_port_ = 0;
  std::thread accept_thread_;
  std::thread tcp_accept_thread_;
  std::atomic<int64_t> calls_[2] = {0, 0};
  std::atomic<int64_t> connections_admitted_[2] = {0, 0};
  std::atomic<size_t> receiving_bytes_{0};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Connection> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_LOCAL_STREAM_SERVER_H_
