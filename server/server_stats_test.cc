#include "server/server_stats.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ps::server {
namespace {

TEST(StalenessHistogramTest, CountsSmallValuesExactlyAndLargeOnesByPowerOfTwo) {
  EXPECT_EQ(StalenessHistogram::BucketOf(0), 0);
  EXPECT_EQ(StalenessHistogram::BucketOf(31), 31);
  EXPECT_EQ(StalenessHistogram::BucketOf(32), 32);
  EXPECT_EQ(StalenessHistogram::BucketOf(63), 32);
  EXPECT_EQ(StalenessHistogram::BucketOf(64), 33);
  EXPECT_EQ(StalenessHistogram::BucketOf(UINT64_MAX),
            StalenessHistogram::kNumBuckets - 1);

  StalenessHistogram h;
  for (uint64_t v : {0, 0, 0, 2, 40, 50}) h.Add(v);
  EXPECT_EQ(h.count(), 6u);
  EXPECT_EQ(h.max(), 50u);
  EXPECT_DOUBLE_EQ(h.mean(), 92.0 / 6);
  EXPECT_EQ(h.CountInBucketOf(0), 3u);
  EXPECT_EQ(h.CountInBucketOf(1), 0u);
  EXPECT_EQ(h.CountInBucketOf(45), 2u);
  EXPECT_EQ(h.ToString(),
            "staleness (updates: 6, mean 15.33, max 50): 0:3 2:1 32-63:2");
}

TEST(StalenessHistogramTest, RestoresItsState) {
  StalenessHistogram h;
  for (uint64_t v : {0, 3, 3, 100}) h.Add(v);
  StalenessHistogram copy;
  copy.Add(7);
  copy.Restore(h.state());
  EXPECT_EQ(copy.ToString(), h.ToString());
  EXPECT_EQ(copy.CountInBucketOf(7), 0u);
}

TEST(StalenessHistogramTest, ReportsAnEmptyHistogram) {
  EXPECT_EQ(StalenessHistogram().ToString(),
            "staleness (updates: 0, mean 0.00, max 0): none");
}

TEST(StalenessHistogramTest, CountsEveryAddFromManyThreads) {
  StalenessHistogram h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 1000; ++i) h.Add(t);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(h.count(), 4000u);
  for (uint64_t v = 0; v < 4; ++v) EXPECT_EQ(h.CountInBucketOf(v), 1000u);
}

TEST(ServerStatsTest, ReportsCountsBytesAndLatency) {
  ServerStats stats;
  stats.RecordPush(absl::OkStatus(), 1 << 20, absl::Milliseconds(3),
                   absl::Milliseconds(4));
  stats.RecordPush(absl::AbortedError("stale"), 1 << 20, absl::ZeroDuration(),
                   absl::Milliseconds(2));
  stats.RecordPull(absl::OkStatus(), 3 << 20, absl::Milliseconds(1),
                   absl::Milliseconds(5));
  EXPECT_EQ(stats.pushes_accepted(), 1u);
  EXPECT_EQ(stats.pushes_refused(), 1u);
  EXPECT_EQ(stats.pulls_served(), 1u);
  EXPECT_EQ(stats.pulls_refused(), 0u);
  const std::string report = stats.ToString();
  EXPECT_NE(report.find("pushes: 1 ok, 1 refused, 2.0 MiB received, latency "
                        "mean 3.00 ms (committing 1.50 ms) max 4.00 ms"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("pulls: 1 ok, 0 refused, 3.0 MiB sent, latency mean "
                        "5.00 ms (waiting 1.00 ms) max 5.00 ms"),
            std::string::npos)
      << report;
}

}  // namespace
}  // namespace ps::server
