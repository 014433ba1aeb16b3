#include "allreduce/rendezvous_state.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ps::allreduce {

RendezvousState::RendezvousState(int num_workers) : num_workers_(num_workers) {}

absl::StatusOr<uint64_t> RendezvousState::Join(int rank,
                                               absl::Duration timeout) {
  if (rank < 0 || rank >= num_workers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [0, ", num_workers_, ")"));
  }
  absl::MutexLock lock(&mu_);
  if (joined_.count(rank) > 0) {
    // A rank joins a round once: this one restarted, so its ring is gone.
    ++round_;
    joined_.clear();
  }
  joined_.insert(rank);
  const uint64_t round = round_;
  if (static_cast<int>(joined_.size()) == num_workers_) {
    complete_round_ = static_cast<int64_t>(round);
  }
  auto settled = [this, round]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return complete_round_ >= static_cast<int64_t>(round) || round_ != round;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&settled), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "round ", round, ": ", joined_.size(), " of ", num_workers_,
        " ranks joined within ", absl::FormatDuration(timeout)));
  }
  if (complete_round_ < static_cast<int64_t>(round)) {
    return absl::AbortedError(absl::StrCat(
        "round ", round, " was abandoned: a rank joined again (round ", round_,
        ")"));
  }
  return round;
}

int RendezvousState::JoinedInCurrentRound() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(joined_.size());
}

void RendezvousState::Set(const std::string& key, std::string value) {
  absl::MutexLock lock(&mu_);
  values_[key] = std::move(value);
}

bool RendezvousState::AllSet(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (values_.count(key) == 0) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> RendezvousState::Get(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto all_set = [this, &keys]()
                     ABSL_NO_THREAD_SAFETY_ANALYSIS { return AllSet(keys); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_set), timeout)) {
    for (const std::string& key : keys) {
      if (values_.count(key) == 0) {
        return absl::DeadlineExceededError(
            absl::StrCat("key \"", key, "\" not set within ",
                         absl::FormatDuration(timeout)));
      }
    }
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(values_.at(key));
  return values;
}

}  // namespace ps::allreduce
