#ifndef PS_UPDATE_SHARD_STORE_H_
#define PS_UPDATE_SHARD_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/partition.h"
#include "update/optimizer.h"
#include "update/range_pool.h"
#include "update/versioned_weights.h"

namespace ps::update {

// A copy of one slice's weights and optimizer state, for checkpoints.
struct SliceSnapshot {
  std::vector<float> weights;
  uint64_t update_count = 0;
  // The optimizer's state vectors ("m", "v"; "momentum"), in its order.
  std::vector<std::pair<std::string, std::vector<float>>> state;
};

// The weights and optimizer state of the slices one server holds.
//
// Which slices is fixed by the partition (`SlicesOfServer(server_index)`);
// each is initialized with InitializeSlice, so a model starts from the same
// weights whatever the number of servers. Slices of tensors declared
// InitializerSpec::kFromRank0 instead await rank 0's values
// (SetInitialValues). Each slice's optimizer applies --weight_decay only if
// its tensor's declaration says so. Slice i of this store is `slices()[i]`.
//
// Thread-safe. Each slice has its own reader/writer lock, so pulls take
// different slices (and the same one) concurrently while an update is being
// applied elsewhere, and a reader never sees a half-updated slice; a pull
// holds the lock only to take a reference to the slice's current version. The
// layout (partition, slices) is immutable and read without locks. An
// update holds its slice's writer lock while the pool's threads update
// ranges of it.
// Snapshot/Restore copy weights and optimizer state for checkpoints.
class ShardStore {
 public:
  static absl::StatusOr<std::unique_ptr<ShardStore>> Create(
      const Partition& partition, int server_index,
      const OptimizerConfig& optimizer);

  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  const Partition& partition() const { return partition_; }
  int server_index() const { return server_index_; }
  const std::vector<Slice>& slices() const { return slices_; }
  // The optimizer the slices run (weight decay only where declared).
  const OptimizerConfig& optimizer() const { return optimizer_; }
  int num_slices() const { return static_cast<int>(slices_.size()); }
  // Elements held, summed over the slices.
  uint64_t num_elements() const { return num_elements_; }

  // Index of the slice that holds all of [offset, offset + n) of tensor
  // `tensor_id`, or -1 if no single owned slice does (n must be >= 1).
  int FindSlice(uint32_t tensor_id, uint64_t offset, uint64_t n) const;

  // The slice's current weights, shared rather than copied: later updates
  // leave this version as it is (see VersionedWeights). `slice` must be in
  // [0, num_slices()).
  VersionedWeights::Version ShareWeights(int slice) const;

  // Runs the slice's optimizer on `gradient` (one value per slice element)
  // under the slice's writer lock, with the given learning rate (a
  // schedule's value for this update) or else the configured one.
  absl::Status ApplyGradient(int slice, absl::Span<const float> gradient,
                             std::optional<float> learning_rate = std::nullopt);
  // The same with the gradient read a run at a time (Optimizer::Apply).
  absl::Status ApplyGradient(int slice, GradientReader gradient,
                             std::optional<float> learning_rate);

  // Copies slice `slice` (weights, optimizer state and update count) under
  // its reader lock.
  SliceSnapshot Snapshot(int slice) const;
  // Replaces every slice's weights and optimizer state with `slices` (one
  // per slice, in order). All are checked first (counts, sizes, state
  // vector names), so on error nothing changes: InvalidArgument naming the
  // slice and what differs. Restored slices await no values.
  absl::Status Restore(const std::vector<SliceSnapshot>& slices);

  // The slice's optimizer state and update count, as Snapshot copies them,
  // without the weights (`weights` is empty).
  SliceSnapshot SnapshotOptimizerState(int slice) const;
  // Replaces every slice's optimizer state and update count with those of
  // `slices` (one per slice, in order; their weights are not read), leaving
  // the weights as they are. Checked first as Restore checks the state: on
  // error nothing changes.
  absl::Status RestoreOptimizerState(const std::vector<SliceSnapshot>& slices);

  // A copy of the slice's current weights.
  std::vector<float> ReadSlice(int slice) const;

  // True while some slice of a kFromRank0 tensor has not received its
  // values; the shard then serves no pull and takes no gradient.
  bool awaiting_initial_values() const {
    return slices_awaiting_values_.load(std::memory_order_acquire) > 0;
  }
  // The first tensor still awaiting its values ("" if none), for messages.
  std::string FirstTensorAwaitingValues() const;
  // Sets the values of every slice awaiting them, all under one lock so
  // that two uploads cannot mix: `read(slice, out)` writes slice `slice`'s
  // values into `out`. Returns false, and calls nothing, if the values were
  // already set: the first upload wins.
  bool SetInitialValues(
      absl::FunctionRef<void(int slice, absl::Span<float> out)> read);
  // Whether slice `slice` belongs to a kFromRank0 tensor.
  bool TakesValuesFromRank0(int slice) const;

  // Slice updates so far that kept some elements as they were because their
  // result would not have been finite (Optimizer::incomplete_updates).
  uint64_t IncompleteUpdates() const;

  // The threads that updates use (one slice's elements are updated in
  // ranges on it; callers may run loops over slices or elements on it too).
  RangePool* pool() const { return pool_.get(); }

 private:
  struct SliceState {
    mutable absl::Mutex mu;
    std::unique_ptr<VersionedWeights> weights ABSL_GUARDED_BY(mu);
    std::unique_ptr<Optimizer> optimizer ABSL_GUARDED_BY(mu);
    bool awaiting_values ABSL_GUARDED_BY(mu) = false;
  };

  ShardStore(const Partition& partition, int server_index,
             const OptimizerConfig& optimizer);

  // InvalidArgument naming slice `i` unless `snap`'s state vectors have the
  // names and sizes of the slice's optimizer's.
  absl::Status CheckSliceState(int i, const SliceSnapshot& snap) const;
  // Sets the slice's update count and state vectors to `snap`'s (checked).
  static void CopyStateLocked(SliceState& state, const SliceSnapshot& snap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu);

  // Runs `update` on the slice's optimizer and writable weights under the
  // slice's writer lock; OutOfRange for a slice that does not exist.
  absl::Status UpdateSlice(
      int slice,
      absl::FunctionRef<absl::Status(Optimizer&, absl::Span<float>)> update);

  const Partition partition_;
  const int server_index_;
  const OptimizerConfig optimizer_;
  const std::vector<Slice> slices_;
  uint64_t num_elements_ = 0;  // Set in Create, then constant.
  // One per slice; unique_ptr because absl::Mutex cannot move.
  std::vector<std::unique_ptr<SliceState>> states_;
  // Serializes SetInitialValues.
  absl::Mutex initial_values_mu_;
  std::atomic<int> slices_awaiting_values_{0};
  // One thread per CPU this process may use (at most 8), the caller
  // included: a shard placed on one CPU updates on one thread.
  const std::unique_ptr<RangePool> pool_;
};

}  // namespace ps::update

#endif  // PS_UPDATE_SHARD_STORE_H_
