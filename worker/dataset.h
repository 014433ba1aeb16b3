#ifndef PS_WORKER_DATASET_H_
#define PS_WORKER_DATASET_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/idx_reader.h"

namespace ps::worker {

class EpochPlan;

// Decides which examples each of M workers trains on at each step of each
// epoch, the same way in every process given the same (N, M, b, seed).
//
// Epoch e visits the examples in a seeded permutation of [0, N): a
// Fisher-Yates shuffle driven by SplitMix64 seeded from (seed, e), ours
// rather than std::shuffle, whose output differs between standard
// libraries. The permutation is cut into global batches of M * b
// consecutive entries; at step k, worker r takes the r-th run of b entries
// of global batch k. So M workers with batch b see, step for step, the same
// examples as one worker with batch M * b. The last global batch, when N is
// not a multiple of M * b, is split as evenly as possible in rank order
// (lower ranks get the extra example; a worker may get none). Across
// workers, the batches of an epoch are disjoint and cover [0, N) exactly
// once.
//
// Immutable after Create, hence thread-safe; cheap to copy.
class EpochSharder {
 public:
  // Fails unless 1 <= num_examples < 2^32, num_workers >= 1 and
  // batch_size >= 1.
  static absl::StatusOr<EpochSharder> Create(uint64_t num_examples,
                                             uint32_t num_workers,
                                             uint32_t batch_size,
                                             uint64_t seed);

  uint64_t num_examples() const { return num_examples_; }
  uint32_t num_workers() const { return num_workers_; }
  uint32_t batch_size() const { return batch_size_; }
  uint64_t seed() const { return seed_; }

  // ceil(N / (M * b)); every worker takes part in every step, possibly with
  // an empty batch at the last one.
  uint64_t steps_per_epoch() const { return steps_per_epoch_; }

  // The order in which epoch `epoch` visits the examples. O(N).
  std::vector<uint32_t> Permutation(uint64_t epoch) const;

  // Computes epoch `epoch`'s permutation once, for cheap per-step lookups.
  EpochPlan PlanEpoch(uint64_t epoch) const;

  // The example indices of worker `rank` at step `step` of epoch `epoch`.
  // Computes the whole permutation (O(N)): per step, prefer PlanEpoch.
  // Fails if step >= steps_per_epoch() or rank >= num_workers().
  absl::StatusOr<std::vector<uint32_t>> BatchIndices(uint64_t epoch,
                                                     uint64_t step,
                                                     uint32_t rank) const;

  // The number of examples worker `rank` gets at step `step` (the same in
  // every epoch). Fails on an out-of-range step or rank.
  absl::StatusOr<uint64_t> BatchSizeAt(uint64_t step, uint32_t rank) const;

  // The number of examples worker `rank` has trained on in an epoch once it
  // has finished steps [0, step); step may be steps_per_epoch().
  absl::StatusOr<uint64_t> ExamplesBeforeStep(uint64_t step,
                                              uint32_t rank) const;

  // For a worker that restarts mid-epoch: the first step of the epoch it has
  // not finished, given the number of examples of this epoch it had trained
  // on. Shard sizes are the same every epoch, so the epoch itself does not
  // matter. Returns steps_per_epoch() once the worker's share of the epoch is
  // done (a worker whose last batch is empty is done after the step before).
  // Fails unless examples_done is ExamplesBeforeStep(k, rank) for some k.
  absl::StatusOr<uint64_t> ResumeStep(uint32_t rank,
                                      uint64_t examples_done) const;

 private:
  friend class EpochPlan;

  EpochSharder(uint64_t num_examples, uint32_t num_workers, uint32_t batch_size,
               uint64_t seed);

  absl::Status CheckStepAndRank(uint64_t step, uint32_t rank) const;
  // Where worker `rank`'s block of step `step` starts in the permutation,
  // and its length. Requires a valid step and rank.
  uint64_t BlockStart(uint64_t step, uint32_t rank) const;
  uint64_t BlockSize(uint64_t step, uint32_t rank) const;

  uint64_t num_examples_;
  uint32_t num_workers_;
  uint32_t batch_size_;
  uint64_t seed_;
  uint64_t global_batch_;     // M * b
  uint64_t full_steps_;       // steps whose global batch is complete
  uint64_t steps_per_epoch_;  // full_steps_, plus one if N % (M * b) != 0
};

// One epoch's permutation with its sharder, so that each step's batch is a
// slice rather than a fresh shuffle. Immutable, hence thread-safe.
class EpochPlan {
 public:
  uint64_t epoch() const { return epoch_; }
  const EpochSharder& sharder() const { return sharder_; }
  absl::Span<const uint32_t> order() const { return order_; }

  // Worker `rank`'s example indices at step `step`: a view into this plan,
  // valid while the plan lives. Fails on an out-of-range step or rank.
  absl::StatusOr<absl::Span<const uint32_t>> BatchIndices(uint64_t step,
                                                          uint32_t rank) const;

 private:
  friend class EpochSharder;

  EpochPlan(const EpochSharder& sharder, uint64_t epoch);

  EpochSharder sharder_;
  uint64_t epoch_;
  std::vector<uint32_t> order_;
};

// A batch of examples in contiguous buffers: images[i * example_size, ...)
// and labels[i] are example i of the batch.
struct Batch {
  int64_t size = 0;
  int64_t example_size = 0;
  std::vector<float> images;  // size * example_size floats
  std::vector<float> labels;  // size floats, class indices
};

// Copies the examples `indices` of `data`, in that order, into `out`,
// reusing its buffers. Fails, leaving `out` untouched, if an index is not
// below data.num_examples.
absl::Status GatherBatch(const LabeledImages& data,
                         absl::Span<const uint32_t> indices, Batch* out);

}  // namespace ps::worker

#endif  // PS_WORKER_DATASET_H_
