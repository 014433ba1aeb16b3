#include "common/byte_stream_call.h"

#include "grpcpp/support/async_stream.h"

namespace ps {

ByteStreamCall::ByteStreamCall(grpc::GenericStub* stub,
                               const std::string& method,
                               grpc::ClientContext* context)
    : context_(context), call_(stub->PrepareCall(context, method, &queue_)) {
  if (call_ == nullptr) return;
  call_->StartCall(this);
  started_ = Await();
}

ByteStreamCall::~ByteStreamCall() {
  if (call_ != nullptr && !finished_) {
    context_->TryCancel();
    Finish();
  }
  queue_.Shutdown();
  void* tag;
  bool ok;
  while (queue_.Next(&tag, &ok)) {
  }
}

bool ByteStreamCall::Await() {
  void* tag;
  bool ok = false;
  // Exactly one operation is in flight, so the next event is its own.
  if (!queue_.Next(&tag, &ok)) return false;
  return ok;
}

bool ByteStreamCall::Write(const grpc::ByteBuffer& message) {
  if (!started_) return false;
  call_->Write(message, this);
  return Await();
}

bool ByteStreamCall::WriteLast(const grpc::ByteBuffer& message) {
  if (!started_) return false;
  call_->WriteLast(message, grpc::WriteOptions(), this);
  return Await();
}

bool ByteStreamCall::WritesDone() {
  if (!started_) return false;
  call_->WritesDone(this);
  return Await();
}

bool ByteStreamCall::Read(grpc::ByteBuffer* message) {
  if (!started_) return false;
  call_->Read(message, this);
  return Await();
}

grpc::Status ByteStreamCall::Finish() {
  if (call_ == nullptr) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        "gRPC could not prepare the call");
  }
  grpc::Status status;
  call_->Finish(&status, this);
  Await();
  finished_ = true;
  return status;
}

}  // namespace ps
