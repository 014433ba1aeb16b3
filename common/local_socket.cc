#include "common/local_socket.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ps {
namespace {

constexpr size_t kHeaderBytes = 8;
constexpr size_t kReadBufferBytes = 64 << 10;
// A payload at least this much larger than what is buffered is read
// straight into its slice rather than through the buffer.
constexpr size_t kDirectReadBytes = kReadBufferBytes / 2;
constexpr FrameType kLastFrameType = FrameType::kStatus;
constexpr int kListenBacklog = 128;
// Socket buffers (the kernel caps them at net.core.wmem_max / rmem_max):
// larger than the default, so that a large message costs each side about
// one wake-up rather than several (bench/README.md, "Small rounds, and the
// same-host transport").
constexpr int kSocketBufferBytes = 4 << 20;
// Over TCP, a reader of a large payload is woken once this much (or the
// rest of the payload) has arrived rather than at every segment.
constexpr size_t kTcpLowWaterBytes = 256 << 10;

void EncodeHeader(uint32_t length, FrameType type, uint8_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(length >> (8 * i));
  out[4] = static_cast<uint8_t>(type);
  out[5] = out[6] = out[7] = 0;
}

grpc::Slice HeaderSlice(uint32_t length, FrameType type) {
  uint8_t header[kHeaderBytes];
  EncodeHeader(length, type, header);
  return grpc::Slice(header, sizeof(header));
}

absl::StatusOr<std::string> RandomHex(size_t bytes) {
  std::string random(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(random.data() + got, bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(random);
}

// The address of abstract socket `name`, and its length.
absl::StatusOr<socklen_t> AbstractAddress(absl::string_view name,
                                          sockaddr_un* address) {
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(address->sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("local socket name \"", name, "\" must hold 1 to ",
                     sizeof(address->sun_path) - 1, " bytes"));
  }
  // sun_path[0] stays 0: the abstract namespace.
  std::memcpy(address->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                name.size());
}

bool IsTcp(int fd) {
  int domain = 0;
  socklen_t size = sizeof(domain);
  return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &size) == 0 &&
         (domain == AF_INET || domain == AF_INET6);
}

// A new Unix stream socket, closed on exec; the caller owns it.
absl::StatusOr<int> NewStreamSocket() {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("local socket: ", std::strerror(errno)));
  }
  return fd;
}

timeval IdleTimeval(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return timeval{0, 0};  // No timeout.
  const timeval tv = absl::ToTimeval(d);
  // 0 would mean no timeout: the shortest wait the kernel knows instead.
  return (tv.tv_sec == 0 && tv.tv_usec == 0) ? timeval{0, 1} : tv;
}

}  // namespace

std::string EncodeStatusPayload(const grpc::Status& status) {
  const uint32_t code = static_cast<uint32_t>(status.error_code());
  std::string payload(4, '\0');
  for (int i = 0; i < 4; ++i) payload[i] = static_cast<char>(code >> (8 * i));
  payload += status.error_message();
  return payload;
}

absl::StatusOr<grpc::Status> DecodeStatusPayload(const grpc::Slice& payload) {
  if (payload.size() < 4) {
    return absl::DataLossError(absl::StrCat(
        "a status frame of ", payload.size(), " bytes holds no status code"));
  }
  const uint8_t* p = payload.begin();
  const uint32_t code =
      p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
  if (code > grpc::StatusCode::UNAUTHENTICATED) {
    return absl::DataLossError(
        absl::StrCat("a status frame holds unknown status code ", code));
  }
  return grpc::Status(
      static_cast<grpc::StatusCode>(code),
      std::string(reinterpret_cast<const char*>(p + 4), payload.size() - 4));
}

absl::StatusOr<std::string> NewLocalSecret() { return RandomHex(16); }

absl::StatusOr<std::string> NewLocalSocketName() {
  absl::StatusOr<std::string> random = RandomHex(8);
  if (!random.ok()) return random.status();
  return absl::StrCat("paramserver-", *random);
}

absl::StatusOr<std::unique_ptr<LocalSocket>> LocalSocket::Connect(
    absl::string_view name) {
  sockaddr_un address;
  absl::StatusOr<socklen_t> length = AbstractAddress(name, &address);
  if (!length.ok()) return length.status();
  absl::StatusOr<int> fd = NewStreamSocket();
  if (!fd.ok()) return absl::UnavailableError(fd.status().message());
  auto socket = std::make_unique<LocalSocket>(*fd);
  while (connect(*fd, reinterpret_cast<const sockaddr*>(&address), *length) !=
         0) {
    if (errno == EINTR) continue;
    return absl::UnavailableError(absl::StrCat(
        "connecting to local socket ", name, ": ", std::strerror(errno)));
  }
  return socket;
}

LocalSocket::LocalSocket(int fd)
    : fd_(fd), tcp_(IsTcp(fd)), read_buffer_(new uint8_t[kReadBufferBytes]) {
  // Best effort: smaller buffers only cost more wake-ups. TCP's receive
  // buffer is left to the kernel, which grows it with the connection's
  // rate (a fixed one would stop that; bench/README.md, "Frames over TCP").
  for (int option : {SO_SNDBUF, SO_RCVBUF}) {
    if (tcp_ && option == SO_RCVBUF) continue;
    setsockopt(fd_, SOL_SOCKET, option, &kSocketBufferBytes,
               sizeof(kSocketBufferBytes));
  }
  if (tcp_) {
    // Frames are gathered before each send: Nagle's wait would only delay
    // a call's last frame.
    const int on = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
  }
}

LocalSocket::~LocalSocket() { close(fd_); }

absl::Status LocalSocket::SetIdleTimeout(absl::Duration timeout) {
  // Reads wait in poll (ReceiveSome), writes in the kernel.
  const timeval tv = IdleTimeval(timeout);
  if (setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return absl::InternalError(
        absl::StrCat("setting a local socket's timeout: ", strerror(errno)));
  }
  idle_timeout_ = timeout;
  return absl::OkStatus();
}

absl::Status LocalSocket::Failure(absl::string_view what, int error) const {
  switch (error) {
    case EAGAIN:
      return absl::DeadlineExceededError(
          absl::StrCat("local connection idle for ",
                       absl::FormatDuration(idle_timeout_), " while ", what));
    case EPIPE:
    case ECONNRESET:
    case ENOTCONN:
    case ESHUTDOWN:
      return absl::UnavailableError(
          absl::StrCat("local connection closed while ", what));
    default:
      return absl::UnavailableError(absl::StrCat(
          "local connection failed while ", what, ": ", std::strerror(error)));
  }
}

void LocalSocket::Queue(FrameType type, absl::string_view payload) {
  queued_.push_back(HeaderSlice(payload.size(), type));
  if (!payload.empty()) queued_.emplace_back(payload.data(), payload.size());
  queued_bytes_ += kHeaderBytes + payload.size();
}

absl::Status LocalSocket::QueueMessage(const grpc::ByteBuffer& message) {
  const size_t length = message.Length();
  if (length > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a message of ", length, " bytes is too large for a local frame"));
  }
  queued_.push_back(HeaderSlice(length, FrameType::kMessage));
  std::vector<grpc::Slice> slices;
  if (grpc::Status s = message.Dump(&slices); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("reading a message's slices: ", s.error_message()));
  }
  for (grpc::Slice& slice : slices) queued_.push_back(std::move(slice));
  queued_bytes_ += kHeaderBytes + length;
  if (queued_bytes_ > kFlushBytes) return Flush();
  return absl::OkStatus();
}

absl::Status LocalSocket::Flush() {
  if (queued_.empty()) return absl::OkStatus();
  iov_.clear();
  for (const grpc::Slice& slice : queued_) {
    if (slice.size() == 0) continue;
    iov_.push_back({const_cast<uint8_t*>(slice.begin()), slice.size()});
  }
  absl::Status status = SendAll();
  // Releases the slices, keeping the vectors' memory for the next frames.
  queued_.clear();
  queued_bytes_ = 0;
  return status;
}

absl::Status LocalSocket::SendAll() {
  size_t next = 0;
  while (next < iov_.size()) {
    msghdr header{};
    header.msg_iov = &iov_[next];
    header.msg_iovlen = std::min<size_t>(iov_.size() - next, IOV_MAX);
    ssize_t sent = sendmsg(fd_, &header, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      return Failure("sending", errno);
    }
    while (sent > 0) {
      iovec& first = iov_[next];
      const size_t n = std::min(static_cast<size_t>(sent), first.iov_len);
      first.iov_base = static_cast<uint8_t*>(first.iov_base) + n;
      first.iov_len -= n;
      sent -= static_cast<ssize_t>(n);
      if (first.iov_len == 0) ++next;
    }
  }
  return absl::OkStatus();
}

absl::Status LocalSocket::Fill(size_t min_bytes) {
  if (read_begin_ == read_end_) read_begin_ = read_end_ = 0;
  if (kReadBufferBytes - read_begin_ < min_bytes) {
    std::memmove(read_buffer_.get(), read_buffer_.get() + read_begin_,
                 read_end_ - read_begin_);
    read_end_ -= read_begin_;
    read_begin_ = 0;
  }
  while (read_end_ - read_begin_ < min_bytes) {
    // With nothing buffered, a frame's start is awaited: the peer is
    // answering or idle, rarely already done.
    absl::StatusOr<size_t> n = ReceiveSome(
        read_buffer_.get() + read_end_, kReadBufferBytes - read_end_,
        /*wait_first=*/read_begin_ == read_end_);
    if (!n.ok()) return n.status();
    read_end_ += *n;
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> LocalSocket::ReceiveSome(uint8_t* out, size_t size,
                                                bool wait_first) {
  const int timeout_ms = idle_timeout_ == absl::InfiniteDuration()
                             ? -1
                             : static_cast<int>(std::clamp<int64_t>(
                                   absl::ToInt64Milliseconds(absl::Ceil(
                                       idle_timeout_, absl::Milliseconds(1))),
                                   1, INT_MAX));
  for (;;) {
    if (wait_first) {
      // Waits for input only. A thread blocked in recv would also be woken
      // each time the peer reads what this side sent (the kernel wakes the
      // sleepers of a Unix socket when its peer frees buffer space): a
      // wake-up for nothing, which costs as much as a real one.
      pollfd p{fd_, POLLIN, 0};
      const int ready = poll(&p, 1, timeout_ms);
      if (ready == 0) return Failure("receiving", EAGAIN);
      if (ready < 0 && errno != EINTR) {
        return Failure("waiting to receive", errno);
      }
    }
    const ssize_t n = recv(fd_, out, size, MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) {
      return absl::UnavailableError("local connection closed by the peer");
    }
    if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Failure("receiving", errno);
    }
    wait_first = errno != EINTR;
  }
}

void LocalSocket::SetReceiveLowWater(size_t bytes) {
  const int low = static_cast<int>(bytes);
  if (low == receive_low_water_) return;
  // Best effort: without it a large payload costs more wake-ups.
  setsockopt(fd_, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof(low));
  receive_low_water_ = low;
}

absl::Status LocalSocket::ReadExactly(uint8_t* out, size_t size) {
  const size_t buffered = std::min(size, read_end_ - read_begin_);
  std::memcpy(out, read_buffer_.get() + read_begin_, buffered);
  read_begin_ += buffered;
  out += buffered;
  size -= buffered;
  if (size == 0) return absl::OkStatus();
  if (size < kDirectReadBytes) {
    if (absl::Status s = Fill(size); !s.ok()) return s;
    std::memcpy(out, read_buffer_.get() + read_begin_, size);
    read_begin_ += size;
    return absl::OkStatus();
  }
  while (size > 0) {
    // TCP wakes a reader for every segment that arrives; this asks it to
    // wait for a good part of what is missing instead.
    if (tcp_) SetReceiveLowWater(std::min<size_t>(size, kTcpLowWaterBytes));
    absl::StatusOr<size_t> n = ReceiveSome(out, size, /*wait_first=*/false);
    if (!n.ok()) return n.status();
    out += *n;
    size -= *n;
  }
  if (tcp_) SetReceiveLowWater(1);  // Frame headers are read as they come.
  return absl::OkStatus();
}

absl::Status LocalSocket::ReadFrame(size_t max_payload, Frame* frame) {
  return ReadFrame(
      max_payload, [](uint32_t) { return absl::OkStatus(); }, frame);
}

absl::Status LocalSocket::ReadFrame(
    size_t max_payload, absl::FunctionRef<absl::Status(uint32_t)> admit,
    Frame* frame) {
  if (absl::Status s = Fill(kHeaderBytes); !s.ok()) return s;
  const uint8_t* h = read_buffer_.get() + read_begin_;
  const uint32_t length =
      h[0] | (h[1] << 8) | (h[2] << 16) | (static_cast<uint32_t>(h[3]) << 24);
  const uint8_t type = h[4];
  if (type == 0 || type > static_cast<uint8_t>(kLastFrameType) || h[5] != 0 ||
      h[6] != 0 || h[7] != 0) {
    return absl::DataLossError(absl::StrCat(
        "malformed local frame header (type ", static_cast<int>(type), ")"));
  }
  if (length > max_payload) {
    return absl::DataLossError(absl::StrCat("a local frame of ", length,
                                            " bytes exceeds the limit of ",
                                            max_payload));
  }
  if (absl::Status s = admit(length); !s.ok()) return s;
  read_begin_ += kHeaderBytes;
  frame->type = static_cast<FrameType>(type);
  grpc::Slice payload(length);
  if (absl::Status s =
          ReadExactly(const_cast<uint8_t*>(payload.begin()), length);
      !s.ok()) {
    return s;
  }
  frame->payload = std::move(payload);
  return absl::OkStatus();
}

bool LocalSocket::HasInputOrHangup() {
  if (read_begin_ != read_end_) return true;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && p.revents != 0;
}

void LocalSocket::Shutdown() { shutdown(fd_, SHUT_RDWR); }

absl::StatusOr<uid_t> LocalSocket::PeerUid() const {
  if (tcp_) {
    return absl::FailedPreconditionError("the user of a TCP peer is not known");
  }
  ucred credentials{};
  socklen_t size = sizeof(credentials);
  if (getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) {
    return absl::InternalError(
        absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  return credentials.uid;
}

absl::StatusOr<std::unique_ptr<LocalListener>> LocalListener::Listen(
    absl::string_view name) {
  sockaddr_un address;
  absl::StatusOr<socklen_t> length = AbstractAddress(name, &address);
  if (!length.ok()) return length.status();
  absl::StatusOr<int> fd = NewStreamSocket();
  if (!fd.ok()) return fd.status();
  std::unique_ptr<LocalListener> listener(new LocalListener(*fd));
  if (bind(*fd, reinterpret_cast<const sockaddr*>(&address), *length) != 0) {
    const int error = errno;
    const std::string message =
        absl::StrCat("binding local socket ", name, ": ", std::strerror(error));
    return error == EADDRINUSE ? absl::FailedPreconditionError(message)
                               : absl::InternalError(message);
  }
  if (listen(*fd, kListenBacklog) != 0) {
    return absl::InternalError(absl::StrCat("listening on local socket ", name,
                                            ": ", std::strerror(errno)));
  }
  return listener;
}

LocalListener::~LocalListener() { close(fd_); }

absl::StatusOr<std::unique_ptr<LocalSocket>> LocalListener::Accept() {
  for (;;) {
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return std::make_unique<LocalSocket>(fd);
    switch (errno) {
      case EINTR:
      case ECONNABORTED:
        continue;
      case EINVAL:  // Shut down.
        return absl::CancelledError("the local listener was shut down");
      case EMFILE:
      case ENFILE:
      case ENOBUFS:
      case ENOMEM:
        return absl::ResourceExhaustedError(
            absl::StrCat("accepting a local connection: ", strerror(errno)));
      default:
        return absl::InternalError(
            absl::StrCat("accepting a local connection: ", strerror(errno)));
    }
  }
}

void LocalListener::Shutdown() { shutdown(fd_, SHUT_RDWR); }

}  // namespace ps
