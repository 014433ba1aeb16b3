#include "client/threaded_push_stream.h"

#include <memory>

namespace ps::client_internal {

ThreadedPushStream::ThreadedPushStream(const PushStreamSpec& spec,
                                       ThreadCache& threads)
    : calls_(spec) {
  threads.Run([this] {
    status_ = calls_.RunWithRetry([this] { return Attempt(); });
    ended_.Notify();
  });
}

ThreadedPushStream::~ThreadedPushStream() {
  CloseAs(nullptr, /*abandon=*/true);
  ended_.WaitForNotification();
}

void ThreadedPushStream::Enqueue(const PushItem& item) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(item);
}

void ThreadedPushStream::Close(TensorValues* weights) {
  CloseAs(weights, /*abandon=*/false);
}

void ThreadedPushStream::CloseAs(TensorValues* weights, bool abandon) {
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  abandoned_ = abandon;
  weights_ = weights;
}

absl::Status ThreadedPushStream::Join() {
  ended_.WaitForNotification();
  return status_;
}

absl::Status ThreadedPushStream::Attempt() {
  std::unique_ptr<ClientStream> call = calls_.Open();
  bool broken = false;
  for (const PushItem& item : sent_) {
    if (!broken) broken = !calls_.Write(item, *call);
  }
  while (true) {
    PushItem item;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ThreadedPushStream* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->closed_ || !s->queue_.empty();
          },
          this));
      if (queue_.empty()) break;  // Closed and drained.
      item = queue_.front();
      queue_.pop_front();
    }
    sent_.push_back(item);
    if (!broken) broken = !calls_.Write(item, *call);
  }
  TensorValues* weights = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (abandoned_) {
      // Without WritesDone, the call is cancelled as it is destroyed.
      return absl::CancelledError("push abandoned");
    }
    weights = weights_;
  }
  return calls_.Complete(*call, broken, weights);
}

}  // namespace ps::client_internal
