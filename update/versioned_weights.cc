#include "update/versioned_weights.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps::update {

// Buffers of released versions, kept for the next copy. Owned jointly by
// the VersionedWeights and every version's deleter, since a pull may drop
// a version after the slice is gone.
class VersionedWeights::Pool {
 public:
  // One idle buffer covers the usual overlap (one update while pulls of
  // the previous version are still sending) and bounds what a slice keeps
  // beyond its live versions.
  static constexpr size_t kMaxIdle = 1;

  std::vector<float> Take(size_t size) {
    absl::MutexLock lock(&mu_);
    if (idle_.empty()) return std::vector<float>(size);
    std::vector<float> buffer = std::move(idle_.back());
    idle_.pop_back();
    buffer.resize(size);
    return buffer;
  }

  void Give(std::vector<float> buffer) {
    absl::MutexLock lock(&mu_);
    if (idle_.size() < kMaxIdle) idle_.push_back(std::move(buffer));
  }

 private:
  absl::Mutex mu_;
  std::vector<std::vector<float>> idle_ ABSL_GUARDED_BY(mu_);
};

VersionedWeights::VersionedWeights(std::vector<float> initial)
    : pool_(std::make_shared<Pool>()), current_(Wrap(std::move(initial))) {}

std::shared_ptr<std::vector<float>> VersionedWeights::Wrap(
    std::vector<float> values) const {
  return std::shared_ptr<std::vector<float>>(
      new std::vector<float>(std::move(values)),
      [pool = pool_](std::vector<float>* v) {
        pool->Give(std::move(*v));
        delete v;
      });
}

absl::Span<float> VersionedWeights::PrepareWrite(bool keep_values) {
  // Versions are handed out only by Share, which the owner's lock keeps
  // from running now, so the count can only fall while we look.
  last_write_copied_ = current_.use_count() > 1;
  if (last_write_copied_) {
    std::vector<float> buffer = pool_->Take(current_->size());
    if (keep_values) {
      std::copy(current_->begin(), current_->end(), buffer.begin());
    }
    current_ = Wrap(std::move(buffer));
  } else {
    // Pairs with the release in the last other holder's decrement: its
    // reads of these values (a send in progress) happen before our writes.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return absl::MakeSpan(*current_);
}

absl::Span<float> VersionedWeights::Writable() {
  return PrepareWrite(/*keep_values=*/true);
}

void VersionedWeights::Assign(absl::Span<const float> values) {
  absl::Span<float> out = PrepareWrite(/*keep_values=*/false);
  std::copy(values.begin(), values.end(), out.begin());
}

}  // namespace ps::update
