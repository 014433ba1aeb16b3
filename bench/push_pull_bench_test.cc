// A smoke run of the benchmark (tiny sizes, short trials) and the checks on
// its inputs. No speed is asserted: a loaded CI machine may be slow.
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/bench_runner.h"
#include "bench/measure.h"
#include "bench/push_pull.h"
#include "gtest/gtest.h"

namespace ps::bench {
namespace {

// One trial of at least one round and at least 50 ms. A single round may be
// far shorter (a 4 KiB memcpy takes ~100 ns), and a coarse or stepped clock
// may read it as no time at all: a rate of 0. 50 ms is many ticks of any
// clock, so every rate comes out positive (push and pull alone add up their
// calls over the trial's rounds).
MeasureOptions Smoke() {
  MeasureOptions options;
  options.warmup_rounds = 1;
  options.trials = 1;
  options.min_rounds = 1;
  options.min_time = absl::Milliseconds(50);
  return options;
}

std::string MakeWorkDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/bench_test.XXXXXX");
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

TEST(PushPullBenchTest, RunsEveryMeasurementOnceWithPositiveRates) {
  BenchConfig config;
  config.sizes = {4096, 64 << 10};
  config.server_counts = {1, 2};
  config.transports = {true, false};
  config.measure = Smoke();
  config.push_pull.server_binary = FindServerBinary("bench/push_pull_bench");
  ASSERT_FALSE(config.push_pull.server_binary.empty())
      << "server binary not in the runfiles";
  config.push_pull.work_dir = MakeWorkDir();
  config.push_pull.chunk_bytes = 16 << 10;  // Several chunks per shard.
  config.echo_chunk_bytes = 16 << 10;

  std::vector<BenchRow> rows;
  absl::Status status =
      RunBench(config, [&rows](const BenchRow& row) { rows.push_back(row); });
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(rows.size(), 8u);
  for (const BenchRow& row : rows) {
    SCOPED_TRACE(TableRow(row));
    EXPECT_GT(row.ours_gbps, 0);
    EXPECT_GT(row.two_calls_gbps, 0);
    EXPECT_GT(row.push_gbps, 0);
    EXPECT_GT(row.pull_gbps, 0);
    EXPECT_GT(row.tcp_gbps, 0);
    EXPECT_GT(row.memcpy_gbps, 0);
    EXPECT_GT(row.echo_gbps, 0);
  }
  EXPECT_EQ(rows[0].size_bytes, 4096u);
  EXPECT_EQ(rows[0].servers, 1);
  EXPECT_EQ(rows[0].transport, "local");
  EXPECT_EQ(rows[1].transport, "grpc");
  EXPECT_EQ(rows[7].size_bytes, 64u << 10);
  EXPECT_EQ(rows[7].servers, 2);
  EXPECT_EQ(rows[7].transport, "grpc");
}

// One 4 KiB row with `servers` shards placed on `server_cpus`.
BenchConfig OneRow(int servers, std::vector<int> server_cpus) {
  BenchConfig config;
  config.sizes = {4096};
  config.server_counts = {servers};
  config.measure = Smoke();
  config.push_pull.server_binary = FindServerBinary("bench/push_pull_bench");
  config.push_pull.work_dir = MakeWorkDir();
  config.push_pull.server_cpus = std::move(server_cpus);
  return config;
}

// The shards (their --cpus) and the baselines' receiving ends on a CPU of
// their own: the last one this test may use.
TEST(PushPullBenchTest, RunsWithTheShardsAndTheReceiversOnServerCpus) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  int last = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) last = cpu;
  }
  BenchConfig config = OneRow(/*servers=*/2, {last});
  std::vector<BenchRow> rows;
  absl::Status status =
      RunBench(config, [&rows](const BenchRow& row) { rows.push_back(row); });
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(rows[0].ours_gbps, 0);
  EXPECT_GT(rows[0].tcp_gbps, 0);
  EXPECT_GT(rows[0].echo_gbps, 0);
}

// A CPU nothing may use reaches both the baselines and the shards.
TEST(PushPullBenchTest, FailsNamingAnUnusableServerCpu) {
  BenchConfig config = OneRow(/*servers=*/1, {1023});
  absl::Status status = RunBench(config, [](const BenchRow&) {});
  EXPECT_NE(status.message().find("CPUs 1023 can be used"),
            absl::string_view::npos)
      << status;
  config.baselines = false;  // Now the shard is the first to try.
  status = RunBench(config, [](const BenchRow&) {});
  EXPECT_NE(status.message().find("server 0"), absl::string_view::npos)
      << status;
  EXPECT_NE(status.message().find("exited with code 2"),
            absl::string_view::npos)
      << status;
}

TEST(PushPullBenchTest, FailsNamingTheShardWhenTheServerBinaryExits) {
  PushPullOptions options;
  options.server_binary = "/bin/false";
  options.size_bytes = 4096;
  options.work_dir = MakeWorkDir();
  options.start_timeout = absl::Seconds(10);
  absl::StatusOr<PushPullResult> result = MeasurePushPull(Smoke(), options);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("server 0"), absl::string_view::npos)
      << result.status();
  EXPECT_NE(result.status().message().find("exited with code 1"),
            absl::string_view::npos)
      << result.status();
}

TEST(PushPullBenchTest, MlpLayersHoldExactlyTheSize) {
  for (uint64_t bytes :
       {uint64_t{8}, uint64_t{4096}, uint64_t{1} << 20, uint64_t{16} << 20,
        uint64_t{64} << 20, uint64_t{12}, uint64_t{4004}}) {
    absl::StatusOr<std::vector<int>> layers = MlpLayersForBytes(bytes);
    ASSERT_TRUE(layers.ok()) << bytes << ": " << layers.status();
    ASSERT_EQ(layers->size(), 2u);
    const uint64_t floats =
        static_cast<uint64_t>((*layers)[0] + 1) * (*layers)[1];
    EXPECT_EQ(floats * 4, bytes);
  }
  absl::StatusOr<std::vector<int>> layers = MlpLayersForBytes(64 << 20);
  ASSERT_TRUE(layers.ok());
  EXPECT_EQ((*layers)[1], 4096);  // Near the square root, not 1 x n.
}

TEST(PushPullBenchTest, RejectsSizesThatAreNotWholeFloats) {
  EXPECT_FALSE(MlpLayersForBytes(0).ok());
  EXPECT_FALSE(MlpLayersForBytes(4).ok());
  EXPECT_FALSE(MlpLayersForBytes(4098).ok());
}

TEST(PushPullBenchTest, ParsesServerCounts) {
  absl::StatusOr<std::vector<int>> counts = ParseServerCounts("1,2");
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::vector<int>{1, 2}));
  for (const char* bad : {"", "0", "17", "1,,2", "two"}) {
    EXPECT_FALSE(ParseServerCounts(bad).ok()) << bad;
  }
}

TEST(PushPullBenchTest, ParsesTransports) {
  absl::StatusOr<std::vector<bool>> transports = ParseTransports("grpc,local");
  ASSERT_TRUE(transports.ok());
  EXPECT_EQ(*transports, (std::vector<bool>{false, true}));
  for (const char* bad : {"", "tcp", "local,local", "local,"}) {
    EXPECT_FALSE(ParseTransports(bad).ok()) << bad;
  }
}

TEST(PushPullBenchTest, RejectsBadMeasureOptions) {
  MeasureOptions options;
  options.min_rounds = 0;
  EXPECT_FALSE(ValidateMeasureOptions(options).ok());
  options = MeasureOptions();
  options.warmup_rounds = -1;
  EXPECT_FALSE(ValidateMeasureOptions(options).ok());
  options = MeasureOptions();
  options.trials = 0;
  EXPECT_FALSE(ValidateMeasureOptions(options).ok());
  options = MeasureOptions();
  options.min_time = -absl::Seconds(1);
  EXPECT_FALSE(ValidateMeasureOptions(options).ok());
}

TEST(PushPullBenchTest, SplitsTheCpusBetweenTheWorkerAndTheShards) {
  CpuSplit split = SplitCpus({0, 1});
  EXPECT_EQ(split.worker, std::vector<int>{0});
  EXPECT_EQ(split.servers, std::vector<int>{1});
  split = SplitCpus({2, 3, 5, 8, 9});
  EXPECT_EQ(split.worker, (std::vector<int>{2, 3}));
  EXPECT_EQ(split.servers, (std::vector<int>{5, 8, 9}));
  for (const std::vector<int>& too_few : {std::vector<int>{4}, {}}) {
    split = SplitCpus(too_few);
    EXPECT_TRUE(split.worker.empty());
    EXPECT_TRUE(split.servers.empty());
  }
}

TEST(PushPullBenchTest, FormatsSizesInWholeUnits) {
  EXPECT_EQ(FormatSize(4096), "4 KiB");
  EXPECT_EQ(FormatSize(64 << 20), "64 MiB");
  EXPECT_EQ(FormatSize(1000), "1000 B");
}

}  // namespace
}  // namespace ps::bench
