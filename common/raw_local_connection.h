#ifndef PS_COMMON_RAW_LOCAL_CONNECTION_H_
#define PS_COMMON_RAW_LOCAL_CONNECTION_H_

// For tests: a same-host connection (common/local_socket.h) written by hand,
// frame header by frame header, so that a test can send what no client of
// ours sends: a frame that stops half-way, a connection that never says
// hello.

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "common/local_socket.h"

namespace ps::testing {

class RawLocalConnection {
 public:
  // Connects to the abstract socket `name`; ok() says whether it did.
  explicit RawLocalConnection(absl::string_view name) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (name.size() + 1 > sizeof(address.sun_path)) return;
    std::memcpy(address.sun_path + 1, name.data(), name.size());
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ >= 0 &&
        connect(fd_, reinterpret_cast<const sockaddr*>(&address),
                offsetof(sockaddr_un, sun_path) + 1 + name.size()) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawLocalConnection() {
    if (fd_ >= 0) close(fd_);
  }
  RawLocalConnection(const RawLocalConnection&) = delete;
  RawLocalConnection& operator=(const RawLocalConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  // Closes the connection now.
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // The header of a frame of `type` whose payload holds `length` bytes.
  bool SendHeader(FrameType type, uint32_t length) {
    const uint8_t header[8] = {static_cast<uint8_t>(length),
                               static_cast<uint8_t>(length >> 8),
                               static_cast<uint8_t>(length >> 16),
                               static_cast<uint8_t>(length >> 24),
                               static_cast<uint8_t>(type),
                               0,
                               0,
                               0};
    return Send(header, sizeof(header));
  }
  bool Send(const void* bytes, size_t size) {
    const char* p = static_cast<const char*>(bytes);
    while (size > 0) {
      const ssize_t n = send(fd_, p, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      p += n;
      size -= static_cast<size_t>(n);
    }
    return true;
  }
  // `n` bytes of zeros.
  bool SendZeros(size_t n) {
    static const char kZeros[64 << 10] = {};
    while (n > 0) {
      const size_t part = n < sizeof(kZeros) ? n : sizeof(kZeros);
      if (!Send(kZeros, part)) return false;
      n -= part;
    }
    return true;
  }
  bool SendFrame(FrameType type, absl::string_view payload) {
    return SendHeader(type, static_cast<uint32_t>(payload.size())) &&
           Send(payload.data(), payload.size());
  }
  // Presents `secret` and reads the answer's header: true for the welcome.
  bool Hello(absl::string_view secret) {
    if (!SendFrame(FrameType::kHello, secret)) return false;
    uint8_t header[8];
    size_t got = 0;
    while (got < sizeof(header)) {
      const ssize_t n = recv(fd_, header + got, sizeof(header) - got, 0);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return header[4] == static_cast<uint8_t>(FrameType::kWelcome);
  }
  // Reads what the server sends until it closes the connection (true), or
  // until nothing came for `timeout` (false).
  bool AwaitClosed(int timeout_seconds) {
    timeval limit{timeout_seconds, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    char buffer[4096];
    for (;;) {
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      return n == 0 || errno == ECONNRESET || errno == EPIPE;
    }
  }

 private:
  int fd_ = -1;
};

}  // namespace ps::testing

#endif  // PS_COMMON_RAW_LOCAL_CONNECTION_H_
