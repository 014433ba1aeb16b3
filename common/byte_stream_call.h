#ifndef PS_COMMON_BYTE_STREAM_CALL_H_
#define PS_COMMON_BYTE_STREAM_CALL_H_

#include <memory>
#include <string>

#include "common/client_stream.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace ps {

// One streaming call whose messages are raw grpc::ByteBuffers, with
// blocking operations, for messages serialized by common/chunk_wire.h.
//
// gRPC's method-by-name API (GenericStub), the one that takes ByteBuffers,
// is asynchronous only; each operation here starts one asynchronous
// operation and waits for it on the call's own completion queue, which is
// what the generated blocking stubs do inside.
//
// Not thread-safe: one thread drives a call. `context` must outlive it.
class ByteStreamCall final : public ClientStream {
 public:
  // Prepares `method` ("/package.Service/Method") over `stub`; it starts
  // with the first write. Failure to start shows as Write/Read returning
  // false and in Finish's status.
  ByteStreamCall(grpc::GenericStub* stub, const std::string& method,
                 grpc::ClientContext* context);
  // The same with a context of the call's own, default but for what
  // ByteStreamCall sets.
  ByteStreamCall(grpc::GenericStub* stub, const std::string& method);
  // Cancels the call unless Finish was called, then drains the queue.
  ~ByteStreamCall() override;

  ByteStreamCall(const ByteStreamCall&) = delete;
  ByteStreamCall& operator=(const ByteStreamCall&) = delete;

  // Each returns false once the stream is broken (Finish says why). The
  // call reaches the server with its first write (or WritesDone): Read
  // before either returns false.
  bool Write(const grpc::ByteBuffer& message) override;
  // Write, then WritesDone, in one operation.
  bool WriteLast(const grpc::ByteBuffer& message) override;
  bool WritesDone() override;
  // False at the end of the stream too.
  bool Read(grpc::ByteBuffer* message) override;

  // The call's status; call once, after reading what was wanted.
  grpc::Status Finish() override;

 private:
  // Waits for the one operation in flight; returns its `ok`.
  bool Await();

  // Set by the constructor without a context.
  const std::unique_ptr<grpc::ClientContext> owned_context_;
  grpc::ClientContext* const context_;
  grpc::CompletionQueue queue_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;
  bool wrote_ = false;
  // WritesDone (or WriteLast) was called: a second WritesDone does nothing.
  bool writes_done_ = false;
  bool finished_ = false;
};

}  // namespace ps

#endif  // PS_COMMON_BYTE_STREAM_CALL_H_
