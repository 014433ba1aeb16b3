#ifndef PS_ALLREDUCE_BUCKET_REDUCER_H_
#define PS_ALLREDUCE_BUCKET_REDUCER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "allreduce/compression.h"

namespace ps::allreduce {

// What BucketedAllreduce sums its buckets with: a ring of one collective
// library (GlooGroup on CPU, NcclGroup on GPUs). Each rank calls
// ReduceBucket with the same length, compression and tag, in the same order.
class BucketReducer {
 public:
  virtual ~BucketReducer() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Replaces `bucket` (host memory) on every rank with the elementwise sum
  // of all ranks' `bucket`, taken in an order fixed by the ranks and the
  // length (the same bits on every rank and run), travelling as
  // `compression` says. `tag` is unique among operations in flight.
  // Unavailable or DeadlineExceeded when a peer is gone or silent: the ring
  // must be formed again.
  virtual absl::Status ReduceBucket(absl::Span<float> bucket,
                                    Compression compression, uint32_t tag) = 0;
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_BUCKET_REDUCER_H_
