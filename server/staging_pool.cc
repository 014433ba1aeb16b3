#include "server/staging_pool.h"

#include <utility>

namespace ps::server {

StagingPool::StagingPool(std::vector<uint64_t> slice_sizes, int max_idle)
    : slice_sizes_(std::move(slice_sizes)), max_idle_(max_idle) {}

GradientBuffers StagingPool::Acquire() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      GradientBuffers buffers = std::move(idle_.back());
      idle_.pop_back();
      return buffers;
    }
  }
  // Allocated (and zeroed) outside the lock: only the first pushes get here.
  GradientBuffers buffers(slice_sizes_.size());
  for (size_t i = 0; i < slice_sizes_.size(); ++i) {
    buffers[i].resize(slice_sizes_[i]);
  }
  return buffers;
}

void StagingPool::Release(GradientBuffers buffers) {
  bool fits = buffers.size() == slice_sizes_.size();
  for (size_t i = 0; fits && i < buffers.size(); ++i) {
    fits = buffers[i].size() == slice_sizes_[i];
  }
  if (!fits) return;  // E.g. a moved-from push's empty buffers.
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(idle_.size()) < max_idle_) {
    idle_.push_back(std::move(buffers));
  }
  // Else `buffers` is freed after the lock is released.
}

int StagingPool::idle() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(idle_.size());
}

}  // namespace ps::server
