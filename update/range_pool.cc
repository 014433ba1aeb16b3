#include "update/range_pool.h"

#include <algorithm>

namespace ps::update {

RangePool::RangePool(int threads) {
  for (int t = 1; t < threads; ++t) {
    helpers_.emplace_back([this] { HelperLoop(); });
  }
}

RangePool::~RangePool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : helpers_) t.join();
}

bool RangePool::ClaimLocked(Loop* loop, size_t* i) {
  if (loop->next == loop->n) return false;
  *i = loop->next++;
  if (loop->next == loop->n) {
    queue_.erase(std::find(queue_.begin(), queue_.end(), loop));
  }
  return true;
}

void RangePool::Run(size_t n, absl::FunctionRef<void(size_t)> fn) {
  if (n <= 1 || helpers_.empty()) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  Loop loop{fn, n};
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(&loop);
  }
  for (;;) {
    size_t i = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!ClaimLocked(&loop, &i)) break;
    }
    fn(i);
    absl::MutexLock lock(&mu_);
    ++loop.finished;
  }
  // Only pieces a helper is running are left; none of them waits for us.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Loop* l) { return l->finished == l->n; }, &loop));
}

void RangePool::ForEachRange(size_t n,
                             absl::FunctionRef<void(size_t, size_t)> fn) {
  if (n == 0) return;
  const size_t threads = static_cast<size_t>(this->threads());
  const size_t even = (n + threads - 1) / threads;
  const size_t range = std::min(kMaxRange, std::max(kMinRange, even));
  const size_t pieces = (n + range - 1) / range;
  Run(pieces, [&](size_t p) {
    const size_t begin = p * range;
    fn(begin, std::min(n, begin + range));
  });
}

void RangePool::HelperLoop() {
  for (;;) {
    Loop* loop = nullptr;
    size_t i = 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(static_cast<const RangePool*>(this),
                                &RangePool::HasWorkLocked));
      if (stop_) return;
      loop = queue_.front();
      ClaimLocked(loop, &i);  // Queued loops have a piece left.
    }
    loop->fn(i);
    absl::MutexLock lock(&mu_);
    ++loop->finished;
  }
}

}  // namespace ps::update
