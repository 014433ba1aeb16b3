// The parts of a host job that need no hosts: reading a metric out of
// Prometheus text, the peaks of metrics over scrapes, comparing shards bit for
// bit, waiting for a value. The jobs themselves run in the network-fault tests
// beside this one.

#include "tests/hosts/host_job.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "update/checkpoint.h"

namespace ps::testing {
namespace {

constexpr char kText[] =
    "# HELP ps_server_version Updates applied to this shard.\n"
    "# TYPE ps_server_version gauge\n"
    "ps_server_version{shard=\"0\"} 42\n"
    "ps_server_version_total{shard=\"0\"} 7\n"
    "ps_server_rank_dead{rank=\"0\",shard=\"0\"} 0\n"
    "ps_server_rank_dead{rank=\"1\",shard=\"0\"} 1\n"
    "ps_server_start_time_seconds 1.7e9\n";

TEST(MetricValueTest, FindsASampleByNameAndLabels) {
  EXPECT_EQ(MetricValue(kText, "ps_server_version"), 42);
  EXPECT_EQ(MetricValue(kText, "ps_server_version_total"), 7);
  EXPECT_EQ(MetricValue(kText, "ps_server_rank_dead", {{"rank", "1"}}), 1);
  EXPECT_EQ(MetricValue(kText, "ps_server_rank_dead", {{"rank", "0"}}), 0);
  EXPECT_EQ(MetricValue(kText, "ps_server_start_time_seconds"), 1.7e9);
}

TEST(MetricValueTest, NothingForAnotherNameOrLabel) {
  EXPECT_EQ(MetricValue(kText, "ps_server"), std::nullopt) << "a prefix";
  EXPECT_EQ(MetricValue(kText, "ps_server_rank_dead", {{"rank", "2"}}),
            std::nullopt);
  EXPECT_EQ(MetricValue(kText, "ps_server_version", {{"shard", "1"}}),
            std::nullopt);
  EXPECT_EQ(MetricValue("", "ps_server_version"), std::nullopt);
}

TEST(MetricPeaksTest, KeepsTheLargestValueOfEachMetricForEachShard) {
  MetricPeaks peaks({"ps_server_version", "ps_server_local_calls_total"});
  peaks.Add(0, "ps_server_version 3\nps_server_local_calls_total 5\n");
  peaks.Add(0, "ps_server_version 7\nps_server_local_calls_total 2\n");
  peaks.Add(1, "ps_server_version 1\n");
  peaks.Add(0, "");  // A scrape of a shard going away.
  EXPECT_EQ(peaks.Peak("ps_server_version", 0), 7);
  EXPECT_EQ(peaks.Peak("ps_server_local_calls_total", 0), 5);
  EXPECT_EQ(peaks.Peak("ps_server_version", 1), 1);
  // Never exported, never read, or not followed: nothing, not 0.
  EXPECT_EQ(peaks.Peak("ps_server_local_calls_total", 1), std::nullopt);
  EXPECT_EQ(peaks.Peak("ps_server_version", 2), std::nullopt);
  EXPECT_EQ(peaks.Peak("ps_server_rank_dead", 0), std::nullopt);
}

TEST(MetricPeaksTest, AZeroIsAPeak) {
  MetricPeaks peaks({"ps_server_local_calls_total"});
  peaks.Add(0, "ps_server_local_calls_total 0\n");
  EXPECT_EQ(peaks.Peak("ps_server_local_calls_total", 0), 0);
}

TEST(CompareWeightsTest, SaysTheFirstDifferenceBitForBit) {
  update::ShardCheckpoint a;
  a.slices.resize(2);
  a.slices[0].weights = {1.0f, 2.0f};
  a.slices[1].weights = {0.0f};
  update::ShardCheckpoint b = a;
  EXPECT_EQ(CompareWeights(a, b), "");
  b.slices[1].weights[0] = -0.0f;  // Equal as floats, not as bits.
  EXPECT_EQ(CompareWeights(a, b), "slice 1 weight 0: 0 against -0");
  b = a;
  b.slices[0].state = {{"momentum", {0.5f, 0.5f}}};
  EXPECT_EQ(CompareWeights(a, b), "slice 0: the optimizer state differs");
  b.slices.pop_back();
  EXPECT_EQ(CompareWeights(a, b), "2 slices against 1");
}

TEST(AwaitValueTest, ReturnsOnceItHoldsAndSaysWhatItLastReadOtherwise) {
  int reads = 0;
  EXPECT_TRUE(AwaitValue(
                  "three reads",
                  [&]() -> absl::StatusOr<double> { return ++reads; },
                  [](double v) { return v >= 3; }, absl::Minutes(1))
                  .ok());
  EXPECT_EQ(reads, 3);
  const absl::Status never = AwaitValue(
      "the impossible",
      []() -> absl::StatusOr<double> {
        return absl::NotFoundError("no such metric");
      },
      [](double) { return true; }, absl::ZeroDuration());
  EXPECT_EQ(never.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(never.message().find("the impossible not reached"),
            std::string::npos)
      << never;
  EXPECT_NE(never.message().find("no such metric"), std::string::npos) << never;
}

}  // namespace
}  // namespace ps::testing
