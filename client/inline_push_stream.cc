#include "client/inline_push_stream.h"

#include <utility>

namespace ps::client_internal {

InlinePushStream::InlinePushStream(const PushStreamSpec& spec) : calls_(spec) {}

InlinePushStream::~InlinePushStream() {
  // Unfinished, the call is cancelled: the shard applies nothing.
  first_call_.reset();
  calls_.AwaitReturned();
}

void InlinePushStream::Enqueue(const PushItem& item) {
  items_.push_back(item);
  if (first_call_ == nullptr) first_call_ = calls_.Open();
  if (!first_call_broken_) {
    first_call_broken_ = !calls_.Write(items_.back(), *first_call_);
  }
}

void InlinePushStream::Close(TensorValues* weights) {
  if (closed_) return;
  closed_ = true;
  weights_ = weights;
  if (first_call_ != nullptr && !first_call_broken_) {
    first_call_broken_ = !first_call_->WritesDone();
  }
}

absl::Status InlinePushStream::Join() {
  return calls_.RunWithRetry([this] { return Attempt(); });
}

absl::Status InlinePushStream::Attempt() {
  std::unique_ptr<ClientStream> call = std::move(first_call_);
  bool broken = first_call_broken_;
  if (call == nullptr) {
    call = calls_.Open();
    broken = false;
    for (const PushItem& item : items_) {
      if (!broken) broken = !calls_.Write(item, *call);
    }
  }
  return calls_.Complete(*call, broken, weights_);
}

}  // namespace ps::client_internal
