#ifndef PS_SERVER_UPDATE_COORDINATOR_H_
#define PS_SERVER_UPDATE_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/push_stager.h"
#include "server/server_stats.h"
#include "server/shard_store.h"

namespace ps::server {

// sync: bulk-synchronous; ssp: stale-synchronous with a bound; async: none.
enum class ConsistencyMode { kSync, kSsp, kAsync };

// Parses "sync", "ssp" or "async".
absl::StatusOr<ConsistencyMode> ParseConsistencyMode(absl::string_view name);
absl::string_view ConsistencyModeName(ConsistencyMode mode);

struct CoordinatorOptions {
  ConsistencyMode mode = ConsistencyMode::kSync;
  int num_workers = 1;
  // ssp only: a pull for clock c proceeds once every rank's clock >= c - s.
  int staleness = 0;
  // A pull that has waited this long logs which ranks it waits for.
  absl::Duration slow_pull_log_after = absl::Seconds(10);
  // How often a waiting pull checks whether its caller gave up.
  absl::Duration poll_interval = absl::Milliseconds(100);
};

// Where a rank stands, as told to a registering worker.
struct RankProgress {
  uint64_t next_step = 0;
  uint64_t epoch = 0;
  uint64_t examples_done = 0;
};

// Decides when validated pushes reach the shard's weights and when pulls may
// be answered, per consistency mode. `version` counts updates applied.
//
// - sync: a push for step t is taken only while version == t (older:
//   Aborted, newer: FailedPrecondition, a rank's second push for t:
//   AlreadyExists). Once all ranks pushed t, the gradients are combined in
//   rank order, weighted by num_examples, so the result is bit-identical
//   whatever the arrival order; the optimizer runs and version = t + 1.
//   A pull for clock c waits until version >= c.
// - async: each push is applied as it comes. A pull never waits.
// - ssp(s): applied as in async; each rank's clock is its last pushed step
//   + 1; a pull for clock c waits until every rank not yet Done has clock
//   >= c - s.
// In ssp and async a rank's step must not go back (AlreadyExists).
//
// Thread-safe. Pushes are received and validated by PushStager without any
// lock; Commit takes `mu_` only briefly. Updates are applied one at a time
// under `apply_mu_` (slices of one update in parallel), outside `mu_`, so a
// waiting pull or a refused push never waits behind the optimizer. Lock
// order: apply_mu_, then mu_ or a slice lock; mu_ is never held while a
// slice lock is taken. Per-rank state lives in `ranks_`. Does not own the
// store, which must outlive it.
class UpdateCoordinator {
 public:
  static absl::StatusOr<std::unique_ptr<UpdateCoordinator>> Create(
      ShardStore* store, const CoordinatorOptions& options);

  UpdateCoordinator(const UpdateCoordinator&) = delete;
  UpdateCoordinator& operator=(const UpdateCoordinator&) = delete;

  // Takes a complete, validated push. Returns the version after it was
  // taken (sync: the update of its step may still be pending).
  absl::StatusOr<uint64_t> Commit(StagedPush push);

  // Blocks until a pull for `clock` may be answered and returns the version
  // then. Returns Cancelled once `cancelled()` (polled, called without any
  // lock held) says the caller gave up, and Unavailable after Shutdown.
  absl::StatusOr<uint64_t> AwaitPull(uint64_t clock,
                                     absl::FunctionRef<bool()> cancelled);

  // Records the incarnation of a (re)starting rank; `rank` must be valid.
  RankProgress Register(int rank, uint64_t incarnation);
  // Marks `rank` finished; true once every rank has. Idempotent.
  bool MarkDone(int rank);

  // Ranks a pull for `clock` is waiting for; empty if it need not wait.
  std::vector<int> RanksBlocking(uint64_t clock) const;

  uint64_t version() const;
  // Wakes every waiting pull with Unavailable and refuses later pushes.
  void Shutdown();

  const CoordinatorOptions& options() const { return options_; }
  const StalenessHistogram& staleness() const { return staleness_; }

 private:
  struct RankState {
    // Steps pushed so far: last pushed step + 1.
    uint64_t clock = 0;
    uint64_t epoch = 0;
    uint64_t examples_done = 0;
    uint64_t incarnation = 0;
    bool done = false;
    // sync: this rank's push for step `version_`, until the step is applied.
    bool pushed_current_step = false;
    std::optional<StagedPush> pending;
  };

  UpdateCoordinator(ShardStore* store, const CoordinatorOptions& options);

  absl::StatusOr<uint64_t> CommitSync(StagedPush push);
  absl::StatusOr<uint64_t> CommitAsync(StagedPush push);
  // Combines the pushes (indexed by rank) into `batch[0]` and applies it.
  absl::Status ApplyAggregate(std::vector<StagedPush>& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Runs fn(slice) for every slice, in parallel for large shards; returns
  // the first error.
  absl::Status ForEachSlice(const std::function<absl::Status(int)>& fn);

  bool PullReadyLocked(uint64_t clock) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::vector<int> RanksBlockingLocked(uint64_t clock) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RecordProgressLocked(const StagedPush& push)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ShardStore* const store_;
  const CoordinatorOptions options_;
  StalenessHistogram staleness_;

  // Held for the whole of one update's application.
  absl::Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<RankState> ranks_ ABSL_GUARDED_BY(mu_);
  // sync: pushes held for step version_.
  int num_pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace ps::server

#endif  // PS_SERVER_UPDATE_COORDINATOR_H_
