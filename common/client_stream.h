#ifndef PS_COMMON_CLIENT_STREAM_H_
#define PS_COMMON_CLIENT_STREAM_H_

#include <utility>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace ps {

// One streaming call as its client drives it: raw messages (serialized by
// common/chunk_wire.h) written and read one at a time, each operation
// blocking, over gRPC (ByteStreamCall) or over the same-host transport
// (client/local_channel.h).
//
// Not thread-safe: one thread drives a call. Destroyed before Finish, a
// call is cancelled: the server applies nothing of it.
class ClientStream {
 public:
  virtual ~ClientStream() = default;

  // Each returns false once the stream is broken (Finish says why).
  virtual bool Write(const grpc::ByteBuffer& message) = 0;
  // Write, then WritesDone.
  virtual bool WriteLast(const grpc::ByteBuffer& message) = 0;
  virtual bool WritesDone() = 0;
  // The server's next message; false at the end of the stream too.
  virtual bool Read(grpc::ByteBuffer* message) = 0;

  // The call's status; call once, after reading what was wanted.
  virtual grpc::Status Finish() = 0;
};

// A call that could not start: every operation fails, and Finish returns
// `status` (e.g. UNAVAILABLE, which the caller's retry loop retries).
class FailedClientStream final : public ClientStream {
 public:
  explicit FailedClientStream(grpc::Status status)
      : status_(std::move(status)) {}

  bool Write(const grpc::ByteBuffer&) override { return false; }
  bool WriteLast(const grpc::ByteBuffer&) override { return false; }
  bool WritesDone() override { return false; }
  bool Read(grpc::ByteBuffer*) override { return false; }
  grpc::Status Finish() override { return status_; }

 private:
  const grpc::Status status_;
};

}  // namespace ps

#endif  // PS_COMMON_CLIENT_STREAM_H_
