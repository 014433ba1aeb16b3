#ifndef PS_CLIENT_THREADED_PUSH_STREAM_H_
#define PS_CLIENT_THREADED_PUSH_STREAM_H_

#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "client/push_stream.h"
#include "client/thread_cache.h"

namespace ps::client_internal {

// A PushStream over gRPC: a thread of its own drains a queue of slices
// into the call, so that Enqueue never waits for the network, and reads
// the shard's answer as soon as the stream is closed.
class ThreadedPushStream final : public PushStream {
 public:
  // Starts the stream's thread on `threads`, which must outlive it.
  ThreadedPushStream(const PushStreamSpec& spec, ThreadCache& threads);
  ~ThreadedPushStream() override;

  void Enqueue(const PushItem& item) override ABSL_LOCKS_EXCLUDED(mu_);
  void Close(TensorValues* weights) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Join() override;
  uint64_t pulled_version() const override { return calls_.pulled_version(); }

 private:
  // With `abandon` the call is cancelled: the shard applies nothing.
  void CloseAs(TensorValues* weights, bool abandon) ABSL_LOCKS_EXCLUDED(mu_);
  // One call: resends what an earlier attempt sent, then streams the queue.
  absl::Status Attempt() ABSL_LOCKS_EXCLUDED(mu_);

  PushCalls calls_;
  // Every slice taken from the queue so far, for a retry. The thread's.
  std::vector<PushItem> sent_;
  absl::Mutex mu_;
  std::deque<PushItem> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  TensorValues* weights_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Written by the thread, read once `ended_` is notified.
  absl::Status status_;
  absl::Notification ended_;
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_THREADED_PUSH_STREAM_H_
