#ifndef PS_ALLREDUCE_GLOO_GROUP_H_
#define PS_ALLREDUCE_GLOO_GROUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "allreduce/bucket_reducer.h"
#include "allreduce/compression.h"
#include "gloo/context.h"
#include "gloo/rendezvous/store.h"

namespace ps::allreduce {

struct GroupOptions {
  int rank = 0;
  int size = 1;
  // The address this rank's TCP transport listens on, as the others reach
  // it (a host name or IP address); empty: the host's name.
  std::string hostname;
  // Of forming the ring and of each collective: a peer silent this long
  // fails the call.
  absl::Duration timeout = absl::Seconds(60);
};

// The workers' ring: a Gloo context over its TCP transport, connected to
// every peer (full mesh) through a rendezvous store, and the one collective
// the all-reduce mode needs. Gloo reports errors by throwing; this class is
// where they become statuses (Unavailable: a peer is gone or silent, the
// ring must be formed again).
//
// Not thread-safe: one thread at a time runs collectives (Gloo's pairs
// carry one operation per tag at a time). Owns the context.
class GlooGroup final : public BucketReducer {
 public:
  // Forms the ring: every rank of `options.size` calls this with the same
  // store (the keys of one round) and its own rank.
  static absl::StatusOr<std::unique_ptr<GlooGroup>> Connect(
      const GroupOptions& options, gloo::rendezvous::Store& store);

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Replaces `data` on every rank with the elementwise sum of all ranks'
  // `data` (same length everywhere; `tag` the same on every rank and unique
  // among operations in flight). Gloo's ring algorithm: each element's sum is
  // taken in an order fixed by the ranks and the length, so the same inputs
  // give the same bits on every run and every rank. Each rank sends and
  // receives 2 (size - 1) / size times the data.
  absl::Status AllreduceSum(absl::Span<float> data, uint32_t tag);

  // AllreduceSum of binary16 values (compression.h's bits), in the same ring
  // order; each addition is taken in float32 and rounded to binary16 (RNE).
  absl::Status AllreduceSumHalf(absl::Span<uint16_t> data, uint32_t tag);

  // AllreduceSum, or with kFp16: rounded to binary16, AllreduceSumHalf,
  // widened back (see Fp16SumBound).
  absl::Status ReduceBucket(absl::Span<float> bucket, Compression compression,
                            uint32_t tag) override;

  // Replaces `data` on every rank with rank `root`'s (same length
  // everywhere; `tag` as above).
  absl::Status Broadcast(absl::Span<char> data, int root, uint32_t tag);

 private:
  GlooGroup(int rank, int size, std::shared_ptr<gloo::Context> context);

  const int rank_;
  const int size_;
  const std::shared_ptr<gloo::Context> context_;
  std::vector<uint16_t> halves_;  // ReduceBucket's, reused.
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_GLOO_GROUP_H_
