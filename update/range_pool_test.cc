#include "update/range_pool.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace ps::update {
namespace {

TEST(RangePoolTest, RunsEveryPieceExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    RangePool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t n : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> runs(n);
      pool.Run(n, [&](size_t i) { ++runs[i]; });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
    }
  }
}

TEST(RangePoolTest, RangesCoverEachElementOnceWithinTheSizeBounds) {
  RangePool pool(3);
  for (size_t n :
       {size_t{1}, RangePool::kMinRange, 3 * RangePool::kMinRange + 5,
        5 * RangePool::kMaxRange + 1}) {
    absl::Mutex mu;
    std::vector<std::pair<size_t, size_t>> ranges;
    pool.ForEachRange(n, [&](size_t b, size_t e) {
      absl::MutexLock lock(&mu);
      ranges.emplace_back(b, e);
    });
    std::sort(ranges.begin(), ranges.end());
    size_t next = 0;
    for (const auto& [b, e] : ranges) {
      EXPECT_EQ(b, next);
      EXPECT_LT(b, e);
      EXPECT_LE(e - b, RangePool::kMaxRange);
      next = e;
    }
    EXPECT_EQ(next, n);
    if (n >= 3 * RangePool::kMinRange) {
      EXPECT_GE(ranges.size(), 3u) << n;
    }
    if (n <= RangePool::kMinRange) {
      EXPECT_EQ(ranges.size(), 1u) << n;
    }
  }
}

TEST(RangePoolTest, UsesHelperThreads) {
  RangePool pool(2);
  absl::Mutex mu;
  std::set<std::thread::id> ids;
  int arrived = 0;
  // Both pieces wait until both started, which only a second thread allows.
  pool.Run(2, [&](size_t) {
    absl::MutexLock lock(&mu);
    ids.insert(std::this_thread::get_id());
    ++arrived;
    mu.Await(absl::Condition(
        +[](int* a) { return *a == 2; }, &arrived));
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(RangePoolTest, NestedAndConcurrentRunsComplete) {
  RangePool pool(3);
  std::atomic<long> sum{0};
  auto outer = [&] {
    pool.Run(8, [&](size_t i) {
      pool.Run(16, [&](size_t j) { sum += static_cast<long>(i * 16 + j); });
    });
  };
  std::thread other(outer);
  outer();
  other.join();
  // Twice the sum of 0..127.
  EXPECT_EQ(sum.load(), 2 * 127 * 128 / 2);
}

}  // namespace
}  // namespace ps::update
