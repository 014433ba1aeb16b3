#include "client/thread_cache.h"

#include <utility>

namespace ps {

ThreadCache::~ThreadCache() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void ThreadCache::Run(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(task));
  if (idle_ >= static_cast<int>(tasks_.size())) return;
  threads_.emplace_back([this] { Loop(); });
}

void ThreadCache::Loop() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    ++idle_;
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !tasks_.empty() || stopping_;
    };
    mu_.Await(absl::Condition(&ready));
    --idle_;
    // Queued tasks run even when stopping: their owners wait for them.
    if (tasks_.empty()) return;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    mu_.Unlock();
    task();
    mu_.Lock();
  }
}

}  // namespace ps
