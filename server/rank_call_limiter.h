#ifndef PS_SERVER_RANK_CALL_LIMITER_H_
#define PS_SERVER_RANK_CALL_LIMITER_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace ps::server {

// Bounds the calls one worker rank may have open on a shard at once. A
// worker holds a push-and-pull stream and, at times, a pull; a client that
// opens many calls in one rank's name, or leaves streams half-sent, is
// refused beyond the bound rather than allowed to take every thread.
//
// Thread-safe. Slots must not outlive the limiter.
class RankCallLimiter {
 public:
  // A call counted against its rank while this lives.
  class Slot {
   public:
    Slot(Slot&& other) : limiter_(other.limiter_), rank_(other.rank_) {
      other.limiter_ = nullptr;
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (limiter_ != nullptr) limiter_->Release(rank_);
    }

   private:
    friend class RankCallLimiter;
    Slot(RankCallLimiter* limiter, int rank) : limiter_(limiter), rank_(rank) {}

    RankCallLimiter* limiter_;
    int rank_;
  };

  // `max_calls` per rank of `num_workers`; 0: no bound.
  RankCallLimiter(int num_workers, int max_calls);

  // A slot for a call of `rank` (in [0, num_workers), checked by the
  // caller), or RESOURCE_EXHAUSTED naming the rank when it has max_calls
  // open already.
  absl::StatusOr<Slot> Acquire(int rank);

 private:
  void Release(int rank);

  const int max_calls_;
  absl::Mutex mu_;
  std::vector<int> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps::server

#endif  // PS_SERVER_RANK_CALL_LIMITER_H_
