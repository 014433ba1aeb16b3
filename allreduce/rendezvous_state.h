#ifndef PS_ALLREDUCE_RENDEZVOUS_STATE_H_
#define PS_ALLREDUCE_RENDEZVOUS_STATE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ps::allreduce {

// What the all-reduce coordinator keeps (proto/ring_rendezvous.proto gives the
// protocol): the rounds in which `num_workers` ranks form a ring, and a
// key-value store for the library's rendezvous within a round.
//
// Join(rank) waits until every rank has joined the current round and
// returns its number. A rank already in the current round that joins
// again opens the next one (it restarted; the ring it was in is broken):
// callers still waiting in the old round get Aborted and join again.
//
// Thread-safe: every method may be called from any thread; waiting calls
// block only their caller.
class RendezvousState {
 public:
  explicit RendezvousState(int num_workers);

  int num_workers() const { return num_workers_; }

  // InvalidArgument for a rank outside [0, num_workers); DeadlineExceeded
  // after `timeout` without every rank; Aborted when a newer round opened
  // while waiting.
  absl::StatusOr<uint64_t> Join(int rank, absl::Duration timeout);

  // Ranks in the current round so far.
  int JoinedInCurrentRound() const;

  void Set(const std::string& key, std::string value);

  // The values of `keys`, in order, once all are set; DeadlineExceeded
  // naming the first missing key after `timeout`.
  absl::StatusOr<std::vector<std::string>> Get(
      const std::vector<std::string>& keys, absl::Duration timeout);

 private:
  bool AllSet(const std::vector<std::string>& keys) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const int num_workers_;
  mutable absl::Mutex mu_;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<int> joined_ ABSL_GUARDED_BY(mu_);
  // The last round in which every rank had joined.
  int64_t complete_round_ ABSL_GUARDED_BY(mu_) = -1;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::allreduce

#endif  // PS_ALLREDUCE_RENDEZVOUS_STATE_H_
