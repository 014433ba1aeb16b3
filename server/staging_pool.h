#ifndef PS_SERVER_STAGING_POOL_H_
#define PS_SERVER_STAGING_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps::server {

// One float vector per shard slice, as large as the slice: where a push
// stream is staged.
using GradientBuffers = std::vector<std::vector<float>>;

// Keeps push staging buffers for reuse, so that a push neither allocates
// nor zero-fills a buffer the size of the shard. A fresh 64 MiB buffer costs
// ~45 ms of page faults (glibc maps and unmaps blocks that large on every
// allocation) and stalls the stream on its first message.
//
// A buffer is taken by Acquire, used by one push (staging, then waiting for
// its sync step, then applying) and handed back by Release; a sync step
// holds one buffer per rank, so up to `max_idle` released buffers are kept
// (memory the shard holds anyway while a step is collected) and any more
// are freed.
//
// Thread-safe. Buffers are moved in and out; the pool owns only idle ones.
class StagingPool {
 public:
  // `slice_sizes`: elements of each slice, in ShardStore order.
  StagingPool(std::vector<uint64_t> slice_sizes, int max_idle);

  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // Buffers sized like the slices. Their values are unspecified: a reused
  // buffer still holds an earlier push's gradients, so the caller must
  // write every element (the stager checks exact coverage) before reading.
  GradientBuffers Acquire();

  // Keeps `buffers` for a later Acquire if it is sized like the slices and
  // fewer than max_idle are kept; frees it otherwise.
  void Release(GradientBuffers buffers);

  int idle() const;

 private:
  const std::vector<uint64_t> slice_sizes_;
  const int max_idle_;
  mutable absl::Mutex mu_;
  std::vector<GradientBuffers> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_STAGING_POOL_H_
