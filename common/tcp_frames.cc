#include "common/tcp_frames.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/unique_fd.h"

namespace ps {
namespace {

constexpr int kListenBacklog = 128;

// The addresses of `host`:`port`; `passive` for a listener.
absl::StatusOr<addrinfo*> Resolve(absl::string_view host, int port,
                                  bool passive) {
  std::string name(host);
  if (absl::ConsumePrefix(&host, "[") && absl::ConsumeSuffix(&host, "]")) {
    name = std::string(host);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  if (passive && name == "0.0.0.0") {
    name.clear();
    hints.ai_family = AF_INET;
  }
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  const int error = getaddrinfo(name.empty() ? nullptr : name.c_str(),
                                service.c_str(), &hints, &found);
  if (error != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resolving ", name, ":", port, ": ", gai_strerror(error)));
  }
  return found;
}

// A large send buffer (as LocalSocket's): a large message is copied to the
// kernel in one go. The receive buffer is left to the kernel's tuning.
void SetSendBuffer(int fd) {
  const int bytes = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

// Connects `fd` (non-blocking) to `address`, waiting at most `timeout`.
absl::Status ConnectWithin(int fd, const addrinfo& address,
                           absl::Duration timeout) {
  if (connect(fd, address.ai_addr, address.ai_addrlen) == 0) {
    return absl::OkStatus();
  }
  if (errno != EINPROGRESS && errno != EINTR) {
    return absl::UnavailableError(std::strerror(errno));
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::UnavailableError(
          absl::StrCat("no connection within ", absl::FormatDuration(timeout)));
    }
    pollfd p{fd, POLLOUT, 0};
    const int ready = poll(
        &p, 1,
        static_cast<int>(std::min<int64_t>(
            absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
            INT_MAX)));
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(std::strerror(errno));
    }
    if (ready > 0) break;
  }
  int error = 0;
  socklen_t size = sizeof(error);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
  if (error != 0) return absl::UnavailableError(std::strerror(error));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TcpFrameListener> ListenTcpFrames(absl::string_view host,
                                                 int port) {
  absl::StatusOr<addrinfo*> found = Resolve(host, port, /*passive=*/true);
  if (!found.ok()) return found.status();
  const addrinfo& address = **found;
  UniqueFd fd(socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, 0));
  absl::Status status;
  if (fd.get() < 0) {
    status = absl::InternalError(
        absl::StrCat("TCP frame socket: ", std::strerror(errno)));
  } else {
    const int on = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    SetSendBuffer(fd.get());
    if (bind(fd.get(), address.ai_addr, address.ai_addrlen) != 0) {
      const std::string message = absl::StrCat(
          "binding TCP port ", port, " on ", host, ": ", std::strerror(errno));
      status = errno == EADDRINUSE ? absl::FailedPreconditionError(message)
                                   : absl::InternalError(message);
    } else if (listen(fd.get(), kListenBacklog) != 0) {
      status = absl::InternalError(
          absl::StrCat("listening on TCP: ", std::strerror(errno)));
    }
  }
  freeaddrinfo(*found);
  if (!status.ok()) return status;
  sockaddr_storage bound{};
  socklen_t size = sizeof(bound);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &size) != 0) {
    return absl::InternalError(
        absl::StrCat("getsockname: ", std::strerror(errno)));
  }
  TcpFrameListener out;
  out.port = ntohs(bound.ss_family == AF_INET6
                       ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                       : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  out.listener = std::make_unique<LocalListener>(fd.release());
  return out;
}

absl::StatusOr<std::unique_ptr<LocalSocket>> ConnectTcpFrames(
    absl::string_view host, int port, absl::Duration timeout) {
  absl::StatusOr<addrinfo*> found = Resolve(host, port, /*passive=*/false);
  if (!found.ok()) {
    return absl::UnavailableError(found.status().message());
  }
  absl::Status last = absl::UnavailableError("no address");
  for (const addrinfo* a = *found; a != nullptr; a = a->ai_next) {
    UniqueFd fd(
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) {
      last = absl::UnavailableError(std::strerror(errno));
      continue;
    }
    SetSendBuffer(fd.get());
    last = ConnectWithin(fd.get(), *a, timeout);
    if (!last.ok()) continue;
    const int flags = fcntl(fd.get(), F_GETFL);
    if (flags < 0 || fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
      last = absl::UnavailableError(std::strerror(errno));
      continue;
    }
    freeaddrinfo(*found);
    return std::make_unique<LocalSocket>(fd.release());
  }
  freeaddrinfo(*found);
  return absl::UnavailableError(absl::StrCat("connecting to ", host, ":", port,
                                             " over TCP: ", last.message()));
}

std::string HostOfTarget(absl::string_view target) {
  if (absl::ConsumePrefix(&target, "[")) {
    const size_t end = target.find("]:");
    if (end == absl::string_view::npos) return "";
    return std::string(target.substr(0, end));
  }
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return "";
  const absl::string_view host = target.substr(0, colon);
  int port = 0;
  if (host.find_first_of(":/") != absl::string_view::npos ||
      !absl::SimpleAtoi(target.substr(colon + 1), &port)) {
    return "";
  }
  return std::string(host);
}

}  // namespace ps
