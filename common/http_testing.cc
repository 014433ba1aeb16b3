#include "common/http_testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ps::testing {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

sockaddr_in Loopback(int port) {
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

// A bound (not listening) loopback socket on a free port.
absl::StatusOr<int> BindFree(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status s = Errno("bind 127.0.0.1:0");
    close(fd);
    return s;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

absl::StatusOr<std::string> HttpGet(int port, absl::string_view path_and_query,
                                    absl::Duration timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const sockaddr_in addr = Loopback(port);
  const std::string url = absl::StrCat("127.0.0.1:", port, path_and_query);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    absl::Status s = Errno(absl::StrCat("connect to ", url));
    close(fd);
    return s;
  }
  const std::string request =
      absl::StrCat("GET ", path_and_query,
                   " HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n");
  std::string response;
  bool sent = send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
              static_cast<ssize_t>(request.size());
  char buffer[16384];
  while (sent) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      sent = false;
    } else {
      response.append(buffer, static_cast<size_t>(n));
    }
  }
  const int saved_errno = errno;
  close(fd);
  if (!sent) {
    errno = saved_errno;
    return Errno(absl::StrCat("GET ", url));
  }
  const size_t head_end = response.find("\r\n\r\n");
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (head_end == std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", url, ": no complete answer: ", response));
  }
  if (status_line.find(" 200 ") == std::string::npos) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GET ", url, ": ", status_line, ": ", response.substr(head_end + 4)));
  }
  return response.substr(head_end + 4);
}

absl::StatusOr<int> UnusedLoopbackPort() {
  int port = 0;
  absl::StatusOr<int> fd = BindFree(&port);
  if (!fd.ok()) return fd.status();
  close(*fd);
  return port;
}

absl::StatusOr<HeldPort> HeldPort::Listen() {
  int port = 0;
  absl::StatusOr<int> fd = BindFree(&port);
  if (!fd.ok()) return fd.status();
  if (listen(*fd, 1) != 0) {
    absl::Status s = Errno("listen");
    close(*fd);
    return s;
  }
  return HeldPort(*fd, port);
}

HeldPort::HeldPort(HeldPort&& other) noexcept
    : fd_(other.fd_), port_(other.port_) {
  other.fd_ = -1;
}

HeldPort::~HeldPort() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace ps::testing
