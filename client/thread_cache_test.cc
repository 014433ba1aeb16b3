#include "client/thread_cache.h"

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(ThreadCacheTest, RunsTasksAtOnceEvenWhenAllThreadsAreBusy) {
  ThreadCache cache;
  absl::Notification release;
  absl::BlockingCounter started(3);
  // Each task waits for the others: they can only all start if each got a
  // thread of its own.
  for (int i = 0; i < 3; ++i) {
    cache.Run([&] {
      started.DecrementCount();
      release.WaitForNotification();
    });
  }
  started.Wait();
  release.Notify();
}

TEST(ThreadCacheTest, DestructorWaitsForQueuedTasks) {
  int ran = 0;
  absl::Mutex mu;
  {
    ThreadCache cache;
    for (int i = 0; i < 10; ++i) {
      cache.Run([&] {
        absl::MutexLock lock(&mu);
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran, 10);
}

}  // namespace
}  // namespace ps
