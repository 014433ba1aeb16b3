#include "server/blocking_stream_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpc/support/time.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

// Tags on a call's own queue (one queue per call, so shared by all calls).
char kReadTag;
char kWriteTag;
char kFinishTag;
char kDoneTag;

// Calls requested from gRPC ahead of their arrival.
constexpr int kRequestsAhead = 2;

// The handler's side of a call: each operation waits for its tag on the
// call's queue, which the handler thread polls itself.
class CallStream final : public ByteStream {
 public:
  CallStream(grpc::GenericServerContext& context,
             grpc::GenericServerAsyncReaderWriter& stream,
             grpc::CompletionQueue& queue, absl::Duration idle_timeout)
      : context_(context),
        stream_(stream),
        queue_(queue),
        idle_timeout_(idle_timeout) {}

  bool Read(grpc::ByteBuffer* message) override {
    stream_.Read(message, &kReadTag);
    return AwaitUnlessIdle(&kReadTag);
  }
  bool Write(const grpc::ByteBuffer& message) override {
    stream_.Write(message, &kWriteTag);
    return AwaitUnlessIdle(&kWriteTag);
  }
  bool IsCancelled() override {
    // The context may be asked only once the done tag came, which before
    // Finish happens only if the call ended early.
    void* tag = nullptr;
    bool ok = false;
    while (!done_ &&
           queue_.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_REALTIME)) ==
               grpc::CompletionQueue::GOT_EVENT) {
      if (tag == &kDoneTag) done_ = true;
    }
    return done_ && context_.IsCancelled();
  }

  // Sends `status`; returns once gRPC is done with the call.
  void Finish(const grpc::Status& status) {
    stream_.Finish(status, &kFinishTag);
    Await(&kFinishTag);
    if (!done_) Await(&kDoneTag);
  }

 private:
  // Await, but a peer that sends nothing (Read) or takes nothing (Write)
  // for idle_timeout_ has its call cancelled: it would hold a thread, and
  // what the call staged, for as long as it likes.
  bool AwaitUnlessIdle(void* tag) {
    if (idle_timeout_ == absl::InfiniteDuration()) return Await(tag);
    const auto deadline = absl::ToChronoTime(absl::Now() + idle_timeout_);
    void* got = nullptr;
    bool ok = false;
    for (;;) {
      switch (queue_.AsyncNext(&got, &ok, deadline)) {
        case grpc::CompletionQueue::GOT_EVENT:
          if (got == &kDoneTag) done_ = true;
          if (got == tag) return ok;
          break;
        case grpc::CompletionQueue::TIMEOUT:
          spdlog::warn(
              "cancelled a {} call of {}: idle for {} (--stream_idle_timeout)",
              context_.method(), context_.peer(),
              absl::FormatDuration(idle_timeout_));
          context_.TryCancel();  // The operation completes, not ok.
          Await(tag);
          return false;
        case grpc::CompletionQueue::SHUTDOWN:
          return false;
      }
    }
  }

  // Waits for `tag`; returns its `ok`.
  bool Await(void* tag) {
    void* got = nullptr;
    bool ok = false;
    while (queue_.Next(&got, &ok)) {
      if (got == &kDoneTag) done_ = true;
      if (got == tag) return ok;
    }
    return false;  // Not reached: the queue is shut down after the call.
  }

  grpc::GenericServerContext& context_;
  grpc::GenericServerAsyncReaderWriter& stream_;
  grpc::CompletionQueue& queue_;
  const absl::Duration idle_timeout_;
  bool done_ = false;
};

}  // namespace

struct BlockingStreamService::Call {
  grpc::GenericServerContext context;
  grpc::GenericServerAsyncReaderWriter stream{&context};
  grpc::CompletionQueue queue;

  ~Call() {
    queue.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue.Next(&tag, &ok)) {
    }
  }
};

BlockingStreamService::BlockingStreamService(int max_threads,
                                             absl::Duration idle_timeout)
    : max_threads_(max_threads), idle_timeout_(idle_timeout) {}

BlockingStreamService::~BlockingStreamService() { Shutdown(); }

void BlockingStreamService::AddTo(grpc::ServerBuilder& builder) {
  builder.RegisterAsyncGenericService(&service_);
  queue_ = builder.AddCompletionQueue();
}

void BlockingStreamService::Start() {
  absl::MutexLock lock(&mu_);
  started_ = true;
  for (int i = 0; i < kRequestsAhead; ++i) RequestCallLocked();
  ++waiting_;
  threads_.emplace_back([this] { ThreadLoop(); });
}

void BlockingStreamService::Shutdown() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    threads.swap(threads_);
  }
  if (queue_ == nullptr) return;
  // Pending requests come back (not ok) as the server shut down; each
  // thread ends once the queue is drained.
  queue_->Shutdown();
  for (std::thread& t : threads) t.join();
  void* tag = nullptr;
  bool ok = false;
  while (queue_->Next(&tag, &ok)) delete static_cast<Call*>(tag);
}

void BlockingStreamService::RequestCallLocked() {
  if (stopping_) return;  // The queue may be shut down.
  auto* call = new Call;
  call->context.AsyncNotifyWhenDone(&kDoneTag);
  service_.RequestCall(&call->context, &call->stream, &call->queue,
                       queue_.get(), call);
}

void BlockingStreamService::ThreadLoop() {
  for (;;) {
    void* tag = nullptr;
    bool ok = false;
    const bool got = queue_->Next(&tag, &ok);
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    bool refuse = false;
    {
      absl::MutexLock lock(&mu_);
      --waiting_;
      if (!got) return;  // Shut down and drained.
      if (ok) {
        RequestCallLocked();
        refuse = max_threads_ > 0 && busy_ >= max_threads_;
        if (!refuse) ++busy_;
        // This thread is taken: another waits for the next call (one more
        // than max_threads_, to refuse calls beyond).
        if (waiting_ == 0 && !stopping_ &&
            (max_threads_ == 0 ||
             static_cast<int>(threads_.size()) <= max_threads_)) {
          ++waiting_;
          threads_.emplace_back([this] { ThreadLoop(); });
        }
      }
    }
    if (ok) Serve(*call, refuse);
    call.reset();
    absl::MutexLock lock(&mu_);
    if (ok && !refuse) --busy_;
    ++waiting_;
  }
}

void BlockingStreamService::Serve(Call& call, bool refuse) {
  CallStream stream(call.context, call.stream, call.queue, idle_timeout_);
  const StreamHandler* handler = methods_.Find(call.context.method());
  if (handler == nullptr) {
    stream.Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""));
  } else if (refuse) {
    stream.Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the server serves ", max_threads_,
                     " streaming calls already, its most at once")));
  } else {
    stream.Finish((*handler)(stream));
  }
}

}  // namespace ps::server
