#ifndef PS_CLIENT_SHARDED_STEP_PUSH_H_
#define PS_CLIENT_SHARDED_STEP_PUSH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "client/parameter_client.h"
#include "client/push_stream.h"
#include "client/tensor_compression.h"
#include "common/partition.h"

namespace ps::client_internal {

// The client's StepPush (and rank 0's upload of initial values): each
// tensor's slices go to the push streams of the shards that hold them, one
// stream per shard the push reaches.
//
// Every Send is checked here, once, against the model (an unknown id, a
// wrong size, a tensor sent twice, a tensor the kind does not carry), so
// that the error names the tensor; a push with a tensor missing is
// cancelled, never sent incomplete (a shard takes a push only if its stream
// covered all its elements, so nothing is applied anywhere).
//
// Each tensor is sent as `choices` (by id) says: bfloat16 and float16 are
// encoded chunk by chunk as they are written; a kTopK tensor is sparsified
// with its residual in `compression` when sent, and the residual left is
// committed once every shard took the push (a failed push leaves it as it
// was).
//
// Thread-safe, as StepPush says. Borrows the partition and `compression`,
// which must outlive it, as must whatever the streams borrow.
class ShardedStepPush final : public StepPush {
 public:
  // Opens the stream to shard `server`.
  using StreamFactory = std::function<std::unique_ptr<PushStream>(int server)>;

  // Opens a stream to every shard holding part of what `kind` carries
  // (every tensor, or for kInitialValues those declared kFromRank0).
  // `on_pulled(step + 1)` is called once FinishWithPull has the weights for
  // step + 1.
  // `compression` may be null when every choice is kNone.
  ShardedStepPush(const Partition* partition, PushKind kind, uint64_t step,
                  const StreamFactory& open_stream,
                  std::function<void(uint64_t)> on_pulled,
                  TensorCompression* compression = nullptr,
                  std::vector<Compression> choices = {});
  // Cancels the streams unless finished.
  ~ShardedStepPush() override;

  absl::Status Send(int id, absl::Span<const float> gradient) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // For kStep and kInitialValues.
  absl::Status Finish() override ABSL_LOCKS_EXCLUDED(mu_);
  // For kStepPullAfter. Returns the smallest version the shards reported.
  absl::StatusOr<uint64_t> FinishWithPull(TensorValues& weights) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Streams = std::vector<std::unique_ptr<PushStream>>;

  // Whether the push carries tensor `id`.
  bool Carries(uint32_t id) const;
  // The streams, once every tensor the push carries was sent; else cancels
  // them and names the first tensor missing.
  absl::StatusOr<Streams> TakeComplete() ABSL_LOCKS_EXCLUDED(mu_);
  // Closes every stream, then waits for each; a pull_after push's answer
  // goes to `weights`, each shard's version to `(*versions)[shard]`.
  static absl::Status JoinStreams(const Streams& streams, TensorValues* weights,
                                  std::vector<uint64_t>* versions);
  // After every shard took the push: the top-k residuals become the
  // tensors'.
  void CommitResiduals() ABSL_LOCKS_EXCLUDED(mu_);

  const Partition& partition_;
  const PushKind kind_;
  const uint64_t step_;
  const std::function<void(uint64_t)> on_pulled_;
  TensorCompression* const compression_;
  const std::vector<Compression> choices_;
  absl::Mutex mu_;
  // By id, for kTopK tensors: the values sent (the streams point into
  // them) and the residual to commit. Declared before the streams, so
  // destroyed after them.
  std::vector<std::vector<float>> sparse_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<float>> residuals_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // By shard; null for a shard the push does not reach.
  Streams streams_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> sent_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::client_internal

#endif  // PS_CLIENT_SHARDED_STEP_PUSH_H_
