#include "common/byte_stream_call.h"

#include "grpcpp/support/async_stream.h"

namespace ps {

ByteStreamCall::ByteStreamCall(grpc::GenericStub* stub,
                               const std::string& method)
    : ByteStreamCall(stub, method, nullptr) {}

ByteStreamCall::ByteStreamCall(grpc::GenericStub* stub,
                               const std::string& method,
                               grpc::ClientContext* context)
    : owned_context_(context == nullptr
                         ? std::make_unique<grpc::ClientContext>()
                         : nullptr),
      context_(context == nullptr ? owned_context_.get() : context) {
  // Corked, the call's metadata goes out with its first write instead of
  // on its own: one completion-queue round trip less per call, as much as
  // the whole exchange of a small push (bench/README.md, "Small rounds, and
  // the same-host transport"). StartCall then
  // performs no operation, so its tag never completes and is not awaited.
  context_->set_initial_metadata_corked(true);
  call_ = stub->PrepareCall(context_, method, &queue_);
  if (call_ == nullptr) return;
  call_->StartCall(/*tag=*/nullptr);
  started_ = true;
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
  if (!started_ || writes_done_) return false;
  wrote_ = true;
  call_->Write(message, this);
  return Await();
}

bool ByteStreamCall::WriteLast(const grpc::ByteBuffer& message) {
  if (!started_ || writes_done_) return false;
  wrote_ = true;
  writes_done_ = true;
  call_->WriteLast(message, grpc::WriteOptions(), this);
  return Await();
}

bool ByteStreamCall::WritesDone() {
  if (!started_) return false;
  if (writes_done_) return true;
  wrote_ = true;
  writes_done_ = true;
  call_->WritesDone(this);
  return Await();
}

bool ByteStreamCall::Read(grpc::ByteBuffer* message) {
  // Before any write the server has not even seen the call: waiting would
  // never end.
  if (!started_ || !wrote_) return false;
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
