// A raw TCP stream between two test hosts, the baseline of what crosses a
// link, without iperf3:
//
//   net_probe serve ADDRESS PORT
//     listens, prints "listening on ADDRESS:PORT", then for each connection
//     reads to its end and prints "received N bytes in S s" (from accept to
//     the end). Runs until killed.
//   net_probe send ADDRESS PORT BYTES TIMEOUT_MS
//     connects (giving up after TIMEOUT_MS), sends BYTES bytes, closes its
//     side and waits for the peer to close; exits 0 with "sent N bytes", 1
//     with the reason it could not.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace {

int Fail(const char* what) {
  std::printf("net_probe: %s: %s\n", what, std::strerror(errno));
  return 1;
}

bool ParseAddress(const char* address, const char* port, sockaddr_in* out) {
  int port_number = 0;
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 1 ||
      port_number > 65535 || inet_pton(AF_INET, address, &out->sin_addr) != 1) {
    std::printf("net_probe: not an IPv4 address and port: %s %s\n", address,
                port);
    return false;
  }
  out->sin_port = htons(static_cast<uint16_t>(port_number));
  return true;
}

int Serve(const sockaddr_in& address, const char* text, const char* port) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  if (listener < 0 ||
      setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
      bind(listener, reinterpret_cast<const sockaddr*>(&address),
           sizeof(address)) != 0 ||
      listen(listener, 16) != 0) {
    return Fail("listen");
  }
  std::printf("listening on %s:%s\n", text, port);
  std::fflush(stdout);
  std::vector<char> buffer(1 << 16);
  while (true) {
    const int connection = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) {
      if (errno == EINTR) continue;
      return Fail("accept");
    }
    const absl::Time start = absl::Now();
    int64_t total = 0;
    ssize_t n = 0;
    while ((n = read(connection, buffer.data(), buffer.size())) != 0) {
      if (n < 0) {
        if (errno == EINTR) continue;
        break;
      }
      total += n;
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    close(connection);
    std::printf("received %lld bytes in %.3f s\n",
                static_cast<long long>(total), seconds);
    std::fflush(stdout);
  }
}

int Send(const sockaddr_in& address, int64_t bytes, int timeout_ms) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Fail("socket");
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address),
              sizeof(address)) != 0) {
    if (errno != EINPROGRESS) return Fail("connect");
    pollfd wait = {fd, POLLOUT, 0};
    const int ready = poll(&wait, 1, timeout_ms);
    if (ready == 0) {
      std::printf("net_probe: connect: no answer in %d ms\n", timeout_ms);
      return 1;
    }
    int error = 0;
    socklen_t length = sizeof(error);
    if (ready < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
      return Fail("connect");
    }
    if (error != 0) {
      errno = error;
      return Fail("connect");
    }
  }
  // Blocking from here on: the link's rate paces the writes.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::vector<char> buffer(1 << 16, 'x');
  int64_t left = bytes;
  while (left > 0) {
    const ssize_t n =
        write(fd, buffer.data(),
              static_cast<size_t>(std::min<int64_t>(left, buffer.size())));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Fail("write");
    }
    left -= n;
  }
  // The peer closes once it read everything: then it all arrived.
  shutdown(fd, SHUT_WR);
  while (read(fd, buffer.data(), buffer.size()) > 0) {
  }
  close(fd);
  std::printf("sent %lld bytes\n", static_cast<long long>(bytes));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  sockaddr_in address;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" && argc == 4) {
    if (!ParseAddress(argv[2], argv[3], &address)) return 2;
    return Serve(address, argv[2], argv[3]);
  }
  int64_t bytes = 0;
  int timeout_ms = 0;
  if (mode == "send" && argc == 6) {
    if (!ParseAddress(argv[2], argv[3], &address)) return 2;
    if (!absl::SimpleAtoi(argv[4], &bytes) || bytes < 0 ||
        !absl::SimpleAtoi(argv[5], &timeout_ms) || timeout_ms < 1) {
      std::printf("net_probe: BYTES >= 0 and TIMEOUT_MS >= 1\n");
      return 2;
    }
    return Send(address, bytes, timeout_ms);
  }
  std::printf(
      "usage: net_probe serve ADDRESS PORT\n"
      "       net_probe send ADDRESS PORT BYTES TIMEOUT_MS\n");
  return 2;
}
