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
};

// Serves `methods` to clients on this host over the same-host transport
// (common/local_socket.h): an abstract Unix socket of a fresh random name,
// admitting connections from processes of this server's user that present
// its secret. Name and secret reach clients through the gRPC port, which
// authenticates them as the server's flags say.
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

  // Calls served so far, and connections admitted.
  int64_t calls() const { return calls_.load(); }
  int64_t connections() const { return connections_admitted_.load(); }
  // Bytes of the messages being received now (max_receiving_bytes).
  size_t receiving_bytes() const { return receiving_bytes_.load(); }

  // The abstract socket's name and the secret a client presents.
  const std::string& socket_name() const { return socket_name_; }
  const std::string& secret() const { return secret_; }

  // Stops taking connections and closes those between calls; calls still
  // running at `deadline` are cancelled. Returns once every handler has
  // returned. Idempotent.
  void Shutdown(absl::Time deadline = absl::InfinitePast())
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
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

  void AcceptLoop() ABSL_LOCKS_EXCLUDED(mu_);
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
  std::thread accept_thread_;
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> connections_admitted_{0};
  std::atomic<size_t> receiving_bytes_{0};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Connection> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_LOCAL_STREAM_SERVER_H_
