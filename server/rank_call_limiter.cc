#include "server/rank_call_limiter.h"

#include "absl/strings/str_cat.h"

namespace ps::server {

RankCallLimiter::RankCallLimiter(int num_workers, int max_calls)
    : max_calls_(max_calls), open_(num_workers, 0) {}

absl::StatusOr<RankCallLimiter::Slot> RankCallLimiter::Acquire(int rank) {
  absl::MutexLock lock(&mu_);
  if (max_calls_ > 0 && open_[rank] >= max_calls_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "worker ", rank, " has ", open_[rank],
        " calls open on this server already; at most ", max_calls_));
  }
  ++open_[rank];
  return Slot(this, rank);
}

void RankCallLimiter::Release(int rank) {
  absl::MutexLock lock(&mu_);
  --open_[rank];
}

}  // namespace ps::server
