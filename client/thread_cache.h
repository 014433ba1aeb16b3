#ifndef PS_CLIENT_THREAD_CACHE_H_
#define PS_CLIENT_THREAD_CACHE_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ps {

// Runs tasks on threads it keeps for the next ones. A worker's every step
// fans out to each shard; starting a thread for that costs as much as a
// small exchange (bench/README.md), so the threads stay: each task goes to
// an idle thread, or to a new one when none is idle.
//
// Thread-safe. The destructor waits for the tasks queued and running, then
// joins every thread.
class ThreadCache {
 public:
  ThreadCache() = default;
  ~ThreadCache();
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  void Run(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ps

#endif  // PS_CLIENT_THREAD_CACHE_H_
