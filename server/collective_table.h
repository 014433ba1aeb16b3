#ifndef PS_SERVER_COLLECTIVE_TABLE_H_
#define PS_SERVER_COLLECTIVE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/collective_combine.h"

namespace ps::server {

// The rendezvous of one shard's collectives: gathers each operation's calls
// from every rank, combines them in rank order (collective_combine.h) once
// the last arrives, and answers every rank alike.
//
// An operation is (generation, name, sequence, part). A rank's call for an
// operation that already holds its call does not contribute again; one for
// an operation completed here gets the completed answer (or error) again,
// from a cache of the latest results bounded by `cache_bytes`; one that
// completed and left the cache is refused (FailedPrecondition). So a
// restarted rank that repeats its calls gets what the others got.
//
// Join: a rank that joined generation g takes no part in g's later
// operations (collective_combine.h says how each kind treats it); once
// every rank joined g, the join is answered with the last rank to join and
// generation g + 1 begins.
//
// A name (not anonymous) keeps its kind, op and shape: a later operation of
// the name that differs fails on every rank.
//
// Thread-safe: every rank's call blocks in Run on its own thread. Combining
// runs outside the lock, on the thread of the last call to arrive.
class CollectiveTable {
 public:
  CollectiveTable(int num_ranks, size_t cache_bytes = 64 << 20);

  CollectiveTable(const CollectiveTable&) = delete;
  CollectiveTable& operator=(const CollectiveTable&) = delete;

  // Contributes `call` of `rank` and waits for the operation's result.
  // InvalidArgument for a rank outside [0, num_ranks) or a call CheckCall
  // refuses (the operation then fails on every rank, naming this one);
  // FailedPrecondition for calls that disagree; Cancelled once
  // `cancelled()` (asked now and then while waiting) returns true, leaving
  // the call's contribution in place for a repeat.
  absl::StatusOr<std::shared_ptr<const CollectiveResult>> Run(
      int rank, CollectiveCall call, absl::FunctionRef<bool()> cancelled)
      ABSL_LOCKS_EXCLUDED(mu_);

  int num_ranks() const { return num_ranks_; }

 private:
  using Key = std::tuple<uint64_t, std::string, uint64_t, uint32_t>;
  // An operation's answer; `done` once set.
  struct Outcome;
  struct Pending {
    std::vector<std::unique_ptr<CollectiveCall>> by_rank;
    // A call CheckCall refused: fails the operation.
    absl::Status invalid;
    bool combining = false;
    std::shared_ptr<Outcome> outcome;  // Set once done.
  };
  struct Generation {
    std::vector<bool> joined;
    int last_joined = -1;
  };

  // Starts combining `key` if every rank that has not joined has called;
  // returns the operation to combine outside the lock, or null.
  Pending* ReadyLocked(const Key& key, Pending& pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Combines `pending` (ReadyLocked returned it) and publishes the outcome.
  void Finish(const Key& key, Pending* pending) ABSL_LOCKS_EXCLUDED(mu_);
  // Checks the name's earlier shape and records the outcome.
  void CompleteLocked(const Key& key, Pending& pending, Outcome outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The join of `rank` in `generation`: completes it once all joined.
  void JoinLocked(int rank, uint64_t generation,
                  std::vector<std::pair<Key, Pending*>>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<const CollectiveResult>> Await(
      const std::shared_ptr<Outcome>& outcome,
      absl::FunctionRef<bool()> cancelled) ABSL_LOCKS_EXCLUDED(mu_);

  const int num_ranks_;
  const size_t cache_bytes_;

  absl::Mutex mu_;
  std::map<Key, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::map<Key, std::shared_ptr<Outcome>> completed_ ABSL_GUARDED_BY(mu_);
  // completed_'s keys, oldest first, and the bytes their results hold.
  std::deque<Key> completed_order_ ABSL_GUARDED_BY(mu_);
  size_t completed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // (generation, name, part) -> the highest sequence dropped from the
  // cache: tells a repeat whose answer left it from an operation not seen
  // yet (operations of one name may complete out of order: calls started
  // together reach the shard in any order).
  std::map<std::tuple<uint64_t, std::string, uint32_t>, uint64_t> evicted_
      ABSL_GUARDED_BY(mu_);
  // A named operation's first call, for the later ones of the name.
  std::map<std::string, CollectiveCall> specs_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Generation> generations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_COLLECTIVE_TABLE_H_
