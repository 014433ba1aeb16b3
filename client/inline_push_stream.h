#ifndef PS_CLIENT_INLINE_PUSH_STREAM_H_
#define PS_CLIENT_INLINE_PUSH_STREAM_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "client/push_stream.h"
#include "common/client_stream.h"

namespace ps::client_internal {

// A PushStream over the same-host transport, driven from the caller's
// thread: its writes only hand bytes to the kernel, so each slice is
// written as it is queued, Close ends the call's messages (the shard can
// start on the push at once), and Join reads the answer. No thread hand-off
// anywhere. A retry, in Join, resends every slice on a new call.
class InlinePushStream final : public PushStream {
 public:
  explicit InlinePushStream(const PushStreamSpec& spec);
  ~InlinePushStream() override;

  void Enqueue(const PushItem& item) override;
  void Close(TensorValues* weights) override;
  absl::Status Join() override;
  uint64_t pulled_version() const override { return calls_.pulled_version(); }

 private:
  // The first attempt completes the call written as slices came; a retry
  // opens a new one.
  absl::Status Attempt();

  PushCalls calls_;
  // Every slice queued so far, for a retry.
  std::vector<PushItem> items_;
  // The first attempt's call, written as slices are queued; opened with the
  // first one.
  std::unique_ptr<ClientStream> first_call_;
  bool first_call_broken_ = false;
  bool closed_ = false;
  TensorValues* weights_ = nullptr;
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_INLINE_PUSH_STREAM_H_
