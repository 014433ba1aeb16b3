#ifndef PS_COMMON_LOCAL_SOCKET_H_
#define PS_COMMON_LOCAL_SOCKET_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/status.h"

namespace ps {

// The same-host transport. A worker and a parameter-server shard on one
// machine carry the streaming calls that move tensors (Pull, Push,
// PushPull) as frames over a Unix stream socket instead of gRPC over TCP:
// a message then costs a system call and a wake-up on each side, where
// gRPC's threads and HTTP/2 framing add several. The messages are the same
// serialized protos, served by the same handlers.
//
// The socket is in Linux's abstract namespace (no file), reachable from
// the same network namespace, so a connection is admitted only from a process
// of the server's user that presents the server's secret, handed out over its
// authenticated gRPC port (ps.proto LocalEndpoint).
//
// The same frames also travel over TCP between hosts (common/tcp_frames.h),
// admitted with the same secret but without the user check, which only a
// Unix socket allows.
//
// The frames, the hello, a call's sequence, how it ends, errors and limits
// are specified in docs/local_socket.md; this file reads and writes them.

// The values are on the wire.
enum class FrameType : uint8_t {
  kHello = 1,
  kWelcome = 2,
  kCall = 3,
  kMessage = 4,
  kHalfClose = 5,
  kStatus = 6,
};

struct Frame {
  FrameType type = FrameType::kMessage;
  grpc::Slice payload;
};

// A kStatus payload and back. The decoder refuses a payload too short to
// hold a code, or a code outside gRPC's.
std::string EncodeStatusPayload(const grpc::Status& status);
absl::StatusOr<grpc::Status> DecodeStatusPayload(const grpc::Slice& payload);

// A fresh random secret (hex), and a fresh abstract socket name; both from
// the kernel's random source.
absl::StatusOr<std::string> NewLocalSecret();
absl::StatusOr<std::string> NewLocalSocketName();

// One connected stream socket (Unix, or TCP: common/tcp_frames.h) that reads
// and writes frames. Owns the descriptor.
//
// Writes are gathered: Queue and QueueMessage keep frames (a message's
// slices by reference, not copied) until Flush, or until more than
// kFlushBytes wait, so that a call's small frames leave in one system call
// and wake the peer once. Reads go through a buffer, so that several small
// frames arrive in one system call; a large payload is read straight into
// its own slice.
//
// Errors: UNAVAILABLE when the peer closed the connection or reset it,
// DEADLINE_EXCEEDED when a read or write waited longer than the idle
// timeout, DATA_LOSS for a malformed frame.
//
// Not thread-safe: one thread reads and writes, but Shutdown may come from
// any thread.
class LocalSocket {
 public:
  // Frames wait in Queue until this many bytes would be sent by Flush.
  static constexpr size_t kFlushBytes = 256 << 10;

  // Connects to the abstract socket `name`; UNAVAILABLE if nothing listens.
  static absl::StatusOr<std::unique_ptr<LocalSocket>> Connect(
      absl::string_view name);

  // Takes ownership of `fd`, a connected Unix or TCP stream socket; a TCP
  // one is set to send at once (TCP_NODELAY: the frames are gathered here).
  explicit LocalSocket(int fd);
  ~LocalSocket();

  LocalSocket(const LocalSocket&) = delete;
  LocalSocket& operator=(const LocalSocket&) = delete;

  // A read or a write that waits for the peer longer than `timeout` fails
  // with DEADLINE_EXCEEDED. Infinite (the default): they wait for good.
  absl::Status SetIdleTimeout(absl::Duration timeout);

  // Adds a frame whose payload is copied.
  void Queue(FrameType type, absl::string_view payload);
  // Adds a kMessage frame holding `message`'s slices (not copied: their
  // memory must stay unchanged until the flush), then flushes if more than
  // kFlushBytes wait. InvalidArgument for a message above 4 GiB.
  absl::Status QueueMessage(const grpc::ByteBuffer& message);
  // Sends every queued frame; the queue is empty afterwards, whatever the
  // outcome.
  absl::Status Flush();

  // Reads the next frame. DATA_LOSS for an unknown type or a payload above
  // `max_payload` bytes.
  absl::Status ReadFrame(size_t max_payload, Frame* frame);
  // As above, and `admit(length)` is called once the header is read, before
  // the payload is: a status other than OK fails the read with it (the
  // payload stays unread), so that a caller can bound what its frames hold.
  absl::Status ReadFrame(size_t max_payload,
                         absl::FunctionRef<absl::Status(uint32_t)> admit,
                         Frame* frame);

  // Whether input or a hang-up waits to be read, without waiting for it.
  bool HasInputOrHangup();

  // Ends both directions: a read or write blocked on this socket, in any
  // thread, returns with an error, as does every later one.
  void Shutdown();

  // Whether the socket is TCP (between hosts) rather than Unix.
  bool is_tcp() const { return tcp_; }

  // The user id of the process at the other end; FAILED_PRECONDITION over
  // TCP, where the kernel does not know it.
  absl::StatusOr<uid_t> PeerUid() const;

 private:
  // Sends iov_ whole.
  absl::Status SendAll();
  // Receives 1 to `size` bytes into `out`, waiting up to the idle timeout
  // for the first. `wait_first`: wait for input before trying, where it is
  // unlikely to be there yet (a system call less than trying first).
  absl::StatusOr<size_t> ReceiveSome(uint8_t* out, size_t size,
                                     bool wait_first);
  // Reads at least `min_bytes` more into the buffer.
  absl::Status Fill(size_t min_bytes);
  // Over TCP: poll and recv wait until `bytes` have arrived (or the peer
  // closed).
  void SetReceiveLowWater(size_t bytes);
  // Reads exactly `size` bytes to `out`, taking buffered ones first.
  absl::Status ReadExactly(uint8_t* out, size_t size);
  absl::Status Failure(absl::string_view what, int error) const;

  const int fd_;
  const bool tcp_;
  // SO_RCVLOWAT as last set (TCP only).
  int receive_low_water_ = 1;
  absl::Duration idle_timeout_ = absl::InfiniteDuration();
  // Queued frames, as the slices to send.
  std::vector<grpc::Slice> queued_;
  size_t queued_bytes_ = 0;
  // Where Flush points the kernel at them.
  std::vector<iovec> iov_;
  // Received bytes [read_begin_, read_end_) not yet consumed.
  std::unique_ptr<uint8_t[]> read_buffer_;
  size_t read_begin_ = 0;
  size_t read_end_ = 0;
};

// A listening abstract Unix socket, or a TCP one (common/tcp_frames.h).
// Owns the descriptor.
//
// Thread-safe: Accept in one thread, Shutdown from any.
class LocalListener {
 public:
  // Listens on the abstract socket `name`. FAILED_PRECONDITION if the name
  // is taken.
  static absl::StatusOr<std::unique_ptr<LocalListener>> Listen(
      absl::string_view name);
  // Takes ownership of `fd`, a listening stream socket.
  explicit LocalListener(int fd) : fd_(fd) {}
  ~LocalListener();

  LocalListener(const LocalListener&) = delete;
  LocalListener& operator=(const LocalListener&) = delete;

  // Waits for the next connection; CANCELLED once shut down.
  absl::StatusOr<std::unique_ptr<LocalSocket>> Accept();
  // Wakes Accept and makes it fail from now on.
  void Shutdown();

 private:
  const int fd_;
};

}  // namespace ps

#endif  // PS_COMMON_LOCAL_SOCKET_H_
