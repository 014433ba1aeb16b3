#ifndef PS_COMMON_TCP_FRAMES_H_
#define PS_COMMON_TCP_FRAMES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/local_socket.h"

namespace ps {

// The frames of common/local_socket.h over TCP, between hosts: the same
// LocalSocket and LocalListener on a TCP descriptor (TCP_NODELAY, a large
// send buffer, the receive buffer left to the kernel's tuning). Admission is
// the caller's: over TCP only the secret admits a connection, as the kernel
// cannot say who the peer is. The bytes are not encrypted: a server with TLS
// does not listen here (docs/local_socket.md, "Between hosts").

// A TCP listener for frames, and the port it is bound to.
struct TcpFrameListener {
  std::unique_ptr<LocalListener> listener;
  int port = 0;
};

// Listens on `host` (an IPv4 or IPv6 address or a name; empty or "0.0.0.0":
// every IPv4 interface, "[::]" or "::": every interface) at `port` (0: a
// free one). FAILED_PRECONDITION if the port is taken, INVALID_ARGUMENT for
// a host that does not resolve.
absl::StatusOr<TcpFrameListener> ListenTcpFrames(absl::string_view host,
                                                 int port);

// Connects to `host`:`port`, waiting at most `timeout` for the connection.
// UNAVAILABLE if nothing answers there, or not within the timeout.
absl::StatusOr<std::unique_ptr<LocalSocket>> ConnectTcpFrames(
    absl::string_view host, int port, absl::Duration timeout);

// The host of a gRPC target "HOST:PORT" ("[V6]:PORT" gives V6); empty if
// the target has another form (a scheme such as "unix:" or "dns:///").
std::string HostOfTarget(absl::string_view target);

}  // namespace ps

#endif  // PS_COMMON_TCP_FRAMES_H_
