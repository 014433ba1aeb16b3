#include "common/stop_signals.h"

#include <signal.h>

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// The signals `on_signal` saw, in order.
class Seen {
 public:
  void Add(int signal) {
    absl::MutexLock lock(&mu_);
    signals_.push_back(signal);
  }
  // Waits for `count` signals.
  std::vector<int> WaitFor(size_t count) {
    absl::MutexLock lock(&mu_);
    wanted_ = count;
    mu_.Await(absl::Condition(this, &Seen::Enough));
    return signals_;
  }

 private:
  bool Enough() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return signals_.size() >= wanted_;
  }

  absl::Mutex mu_;
  std::vector<int> signals_ ABSL_GUARDED_BY(mu_);
  size_t wanted_ ABSL_GUARDED_BY(mu_) = 0;
};

bool BlockedHere(int signal) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal) == 1;
}

TEST(StopSignalsTest, CallsOnSignalOnItsThreadForEachSignal) {
  auto signals = StopSignals::Install({SIGUSR1, SIGUSR2});
  ASSERT_TRUE(signals.ok()) << signals.status();
  Seen seen;
  (*signals)->Watch([&seen](int signal) { seen.Add(signal); });
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  EXPECT_EQ(seen.WaitFor(1), std::vector<int>({SIGUSR1}));
  ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
  EXPECT_EQ(seen.WaitFor(2), std::vector<int>({SIGUSR1, SIGUSR2}));
}

TEST(StopSignalsTest, HoldsASignalThatComesBeforeWatch) {
  auto signals = StopSignals::Install({SIGUSR1});
  ASSERT_TRUE(signals.ok()) << signals.status();
  // Blocked in this thread and no other takes it: pending until Watch.
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
  Seen seen;
  (*signals)->Watch([&seen](int signal) { seen.Add(signal); });
  EXPECT_EQ(seen.WaitFor(1), std::vector<int>({SIGUSR1}));
}

TEST(StopSignalsTest, ThreadsStartedAfterInstallHaveTheSignalsBlocked) {
  auto signals = StopSignals::Install({SIGUSR1});
  ASSERT_TRUE(signals.ok()) << signals.status();
  EXPECT_TRUE(BlockedHere(SIGUSR1));
  bool blocked = false;
  std::thread([&blocked] { blocked = BlockedHere(SIGUSR1); }).join();
  EXPECT_TRUE(blocked);
}

TEST(StopSignalsTest, ASignalTakenByAnUnblockedThreadReachesTheWatcher) {
  auto signals = StopSignals::Install({SIGUSR1});
  ASSERT_TRUE(signals.ok()) << signals.status();
  Seen seen;
  (*signals)->Watch([&seen](int signal) { seen.Add(signal); });
  // As a thread of a library started before main: the handler runs on it.
  std::thread([] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    pthread_kill(pthread_self(), SIGUSR1);
  }).join();
  EXPECT_EQ(seen.WaitFor(1), std::vector<int>({SIGUSR1}));
}

TEST(StopSignalsTest, OneInstanceAtATime) {
  auto first = StopSignals::Install({SIGUSR1});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(StopSignals::Install({SIGUSR2}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  first->reset();
  EXPECT_TRUE(StopSignals::Install({SIGUSR2}).ok());
}

TEST(StopSignalsTest, DestroyingEndsTheWatchAndRestoresTheHandler) {
  struct sigaction before;
  sigaction(SIGUSR2, nullptr, &before);
  {
    auto signals = StopSignals::Install({SIGUSR2});
    ASSERT_TRUE(signals.ok()) << signals.status();
    (*signals)->Watch([](int) {});
    struct sigaction during;
    sigaction(SIGUSR2, nullptr, &during);
    EXPECT_NE(during.sa_handler, before.sa_handler);
  }
  struct sigaction after;
  sigaction(SIGUSR2, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

}  // namespace
}  // namespace ps
