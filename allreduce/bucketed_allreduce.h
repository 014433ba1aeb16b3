#ifndef PS_ALLREDUCE_BUCKETED_ALLREDUCE_H_
#define PS_ALLREDUCE_BUCKETED_ALLREDUCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "allreduce/bucket_reducer.h"
#include "allreduce/compression.h"

namespace ps::allreduce {

// Where each tensor goes: tensors are packed into buckets from the last to
// the first (the order in which backward produces gradients), each bucket up
// to `bucket_elements` unless one tensor alone is larger. A tensor listed in
// `exact_tensors` gets a bucket of its own that is never compressed (counts
// and positions that must stay exact).
struct BucketPlan {
  struct Place {
    int bucket = 0;
    size_t offset = 0;  // In the bucket.
  };
  std::vector<Place> places;         // One per tensor.
  std::vector<size_t> bucket_sizes;  // Elements.
  std::vector<int> tensors_in_bucket;
  std::vector<bool> exact_bucket;  // Never compressed.

  static BucketPlan Make(absl::Span<const size_t> tensor_sizes,
                         size_t bucket_elements,
                         absl::Span<const int> exact_tensors = {});
};

// Sums a step's tensors across the ranks of a BucketReducer (a GlooGroup or
// an NcclGroup), a bucket at a time,
// while the caller still produces the rest: as DDP and Horovod fuse
// gradients into buckets and all-reduce each as soon as it is full. Buckets
// are reduced in index order on a thread of this object, so every rank
// issues the same collectives in the same order, whatever order its tensors
// come in, and each element's sum has the same bits on every rank and run
// (BucketReducer::ReduceBucket). With Compression::kFp16 every bucket but
// the exact tensors' travels as binary16: each element of a sum is then
// within Fp16SumBound of the exact sum of the ranks' values.
//
// A step: Begin, Add every tensor once, Wait, then read Reduced. One thread
// calls these (not thread-safe between them); the bucket thread is internal.
// An error (a peer gone) ends this object's use: every later step fails too,
// as the ring must be formed again. Borrows `group`, which must outlive it.
class BucketedAllreduce {
 public:
  // InvalidArgument for no tensors, a bucket smaller than a float or an
  // exact tensor that is not one of them.
  static absl::StatusOr<std::unique_ptr<BucketedAllreduce>> Create(
      BucketReducer* group, std::vector<size_t> tensor_sizes,
      size_t bucket_bytes, Compression compression = Compression::kNone,
      std::vector<int> exact_tensors = {});
  // Waits for the bucket in flight, if any (up to the group's timeout).
  ~BucketedAllreduce();

  const BucketPlan& plan() const { return plan_; }

  // FailedPrecondition while a step is open or after an error.
  absl::Status Begin();
  // Puts `scale * values` in the tensor's place; its bucket's all-reduce
  // starts once every tensor of the bucket is in. InvalidArgument for an
  // unknown tensor, a wrong size or a tensor added twice.
  absl::Status Add(int tensor, absl::Span<const float> values, float scale);
  // Waits for every bucket; FailedPrecondition if some tensor was not added
  // (the step cannot complete), else the first collective's error.
  absl::Status Wait();
  // After a successful Wait: the sum over the ranks of the tensor's values.
  absl::Span<const float> Reduced(int tensor) const;

 private:
  BucketedAllreduce(BucketReducer* group, std::vector<size_t> tensor_sizes,
                    BucketPlan plan, Compression compression);
  void Loop();

  BucketReducer* const group_;
  const Compression compression_;
  const std::vector<size_t> tensor_sizes_;
  const BucketPlan plan_;
  // Written by Add (a bucket's tensors before it is ready), read by the
  // bucket thread (once ready) and Reduced (after Wait).
  std::vector<std::vector<float>> buckets_;
  std::vector<bool> added_;  // Caller's thread only.

  absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<int> missing_ ABSL_GUARDED_BY(mu_);  // Tensors, per bucket.
  int next_bucket_ ABSL_GUARDED_BY(mu_) = 0;       // The thread's.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // Last: started once the rest is built.
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_BUCKETED_ALLREDUCE_H_
