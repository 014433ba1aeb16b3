#ifndef PS_SERVER_BLOCKING_STREAM_SERVICE_H_
#define PS_SERVER_BLOCKING_STREAM_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"
#include "server/byte_stream.h"

namespace ps::server {

// Serves chosen methods as bidirectional streams of raw messages
// (grpc::ByteBuffer) with blocking handlers, through gRPC's asynchronous
// generic API: the typed service beside it marks those methods generic (the
// generated WithGenericMethod_), and a client-streaming or server-streaming
// peer cannot tell.
//
// Threads of this service wait for calls; the one that takes a call runs
// its handler, and the call's operations complete on a queue of the call's
// own that the same thread waits on, as in gRPC's synchronous server: no
// thread hands work to another. At most `max_threads` handlers run at once
// (0: no bound); a call beyond them is refused with RESOURCE_EXHAUSTED, as
// gRPC's synchronous server refuses a call beyond its thread quota: queued,
// it could wait behind pulls that wait for it. Threads that ran a call stay
// for later ones.
//
// Lifecycle: Handle, then AddTo the builder, Start once the server started,
// Shutdown once the server's Shutdown returned (GrpcServer does the last
// three). Thread-safe once started.
class BlockingStreamService {
 public:
  // A call whose peer sends or takes no message for `idle_timeout` is
  // cancelled (its Read or Write returns false).
  explicit BlockingStreamService(
      int max_threads, absl::Duration idle_timeout = absl::InfiniteDuration());
  // Shuts down if started; see Shutdown.
  ~BlockingStreamService();

  BlockingStreamService(const BlockingStreamService&) = delete;
  BlockingStreamService& operator=(const BlockingStreamService&) = delete;

  // Serves `method` ("/package.Service/Method") with `handler`; other
  // methods no typed service registered get UNIMPLEMENTED. Before Start.
  void Handle(std::string method, StreamHandler handler) {
    methods_.Add(std::move(method), std::move(handler));
  }
  // The methods served, for another transport to serve them too.
  const StreamMethods& methods() const { return methods_; }

  // Registers the service and its queue with `builder`.
  void AddTo(grpc::ServerBuilder& builder);
  // Starts taking calls.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops taking calls and waits for the running handlers; only after the
  // server's Shutdown (which ends their calls) returned. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Call;

  // Asks gRPC for the next call, unless shutting down. Under mu_, so that
  // Shutdown cannot shut queue_ between the check and the request.
  void RequestCallLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ThreadLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the handler of `call`'s method, or refuses it, and finishes it.
  void Serve(Call& call, bool refuse);

  const int max_threads_;
  const absl::Duration idle_timeout_;
  // Written before Start only.
  StreamMethods methods_;
  grpc::AsyncGenericService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> queue_;

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Threads waiting on queue_ for a call.
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // Handlers running.
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_BLOCKING_STREAM_SERVICE_H_
