#include "server/shard_report.h"

#include <filesystem>
#include <string>

#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

ShardReport Restored() {
  ShardReport r;
  r.server_index = 1;
  r.mode = "sync";
  r.version = 240;
  r.updates_replayed = 23;
  r.updates_lost = 0;
  r.replayed_pushes = 2;
  r.examples_per_epoch = {{0, 60000}, {1, 15360}};
  r.staleness_updates = 240;
  r.staleness_max = 1;
  r.pushes = {480, 1, 2500, 91000, 400};
  r.pulls = {481, 0, 3100, 120000, 2050};
  return r;
}

TEST(ShardReportTest, RoundTrips) {
  ShardReport unknown;
  unknown.mode = "async";
  unknown.updates_lost.reset();
  for (const ShardReport& r : {Restored(), ShardReport{}, unknown}) {
    const std::string text = FormatShardReport(r);
    absl::StatusOr<ShardReport> parsed = ParseShardReport(text);
    if (r.mode.empty()) {
      // A report needs a mode.
      EXPECT_FALSE(parsed.ok()) << text;
      continue;
    }
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
    EXPECT_TRUE(*parsed == r) << text;
  }
}

TEST(ShardReportTest, WritesTheFieldsOnePerLine) {
  EXPECT_EQ(FormatShardReport(Restored()),
            "ps-shard-report 2\nserver 1\nmode sync\nversion 240\n"
            "updates_replayed 23\nupdates_lost 0\n"
            "examples_per_epoch 0=60000 1=15360\nreplayed_pushes 2\n"
            "staleness_updates 240\nstaleness_max 1\npushes_ok 480\n"
            "pushes_refused 1\npush_latency_mean_us 2500\n"
            "push_latency_max_us 91000\npush_commit_mean_us 400\n"
            "pulls_ok 481\npulls_refused 0\npull_latency_mean_us 3100\n"
            "pull_latency_max_us 120000\npull_wait_mean_us 2050\n");
  ShardReport r = Restored();
  r.updates_replayed.reset();
  r.updates_lost.reset();
  const std::string text = FormatShardReport(r);
  EXPECT_EQ(text.find("updates_replayed"), std::string::npos);
  EXPECT_NE(text.find("updates_lost unknown\n"), std::string::npos);
}

TEST(ShardReportTest, RefusesWhatItDoesNotWrite) {
  const std::string good = FormatShardReport(Restored());
  auto replaced = [&good](const std::string& from, const std::string& to) {
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  for (const std::string& text : {
           std::string(),
           replaced("ps-shard-report 2", "ps-shard-report 1"),
           replaced("version 240\n", ""),
           replaced("pull_wait_mean_us 2050\n", ""),
           replaced("pushes_ok 480", "pushes_ok 4.8e2"),
           replaced("version 240", "version -3"),
           replaced("version 240", "version 24x"),
           replaced("updates_lost 0", "updates_lost lots"),
           replaced("mode sync", "mode fast"),
           replaced("0=60000", "0=60000 0=1"),
           replaced("1=15360", "1:15360"),
           good + "version 241\n",
           good + "colour blue\n",
       }) {
    absl::StatusOr<ShardReport> parsed = ParseShardReport(text);
    EXPECT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ShardReportTest, WritesAndReadsAFile) {
  const std::string dir = ps::testing::FreshTestDir("shard_report");
  const std::string path = dir + "/server1.report";
  EXPECT_EQ(ReadShardReport(path).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WriteShardReport(path, Restored()).ok());
  ShardReport later = Restored();
  later.version = 300;
  ASSERT_TRUE(WriteShardReport(path, later).ok());  // Replaces it.
  absl::StatusOr<ShardReport> read = ReadShardReport(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == later);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(WriteShardReport(dir + "/missing/dir/report", later).code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace ps::server
