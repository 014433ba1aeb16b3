#include "deploy/local/run_directory.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::UnusedTestPath;
using ::testing::HasSubstr;

TEST(RunDirectoryTest, RecordRoundTrips) {
  RunRecord record;
  record.job_id = "launch-1-2";
  record.state = "stopped";
  record.outcome = "interrupted by signal 2 (SIGINT)";
  record.flags = {{"epochs", "10"}, {"server_flags", "--a=1 --b=2"}};
  record.program = {"/usr/bin/python3", "train.py", "--lr=1 2"};
  absl::StatusOr<RunRecord> parsed = ParseRunRecord(FormatRunRecord(record));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->job_id, record.job_id);
  EXPECT_EQ(parsed->state, record.state);
  EXPECT_EQ(parsed->outcome, record.outcome);
  EXPECT_EQ(parsed->flags, record.flags);
  EXPECT_EQ(parsed->program, record.program);
}

TEST(RunDirectoryTest, SegmentsRoundTripAndChangeTheFlags) {
  RunRecord record;
  record.job_id = "launch-1-2";
  record.state = "running";
  record.flags = {{"epochs", "5"}, {"learning_rate", "0"}, {"model", "mlp"}};
  record.segments = {
      {"start", "2026-03-14 10:15:00", {}, "stopped: interrupted"},
      {"resume", "2026-03-14 10:20:00", {}, "finished: final test accuracy 1"},
      {"extend",
       "2026-03-14 10:30:00",
       {{"epochs", "10"}, {"server_flags", "--a=1 --b=2"}},
       ""}};
  const std::string text = FormatRunRecord(record);
  EXPECT_THAT(text, HasSubstr("segment 3 extend 2026-03-14 10:30:00\n"
                              "segment_flag epochs=10\n"));
  absl::StatusOr<RunRecord> parsed = ParseRunRecord(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->segments.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(parsed->segments[i].kind, record.segments[i].kind);
    EXPECT_EQ(parsed->segments[i].started, record.segments[i].started);
    EXPECT_EQ(parsed->segments[i].flags, record.segments[i].flags);
    EXPECT_EQ(parsed->segments[i].end, record.segments[i].end);
  }
  EXPECT_EQ(parsed->flags, record.flags);  // As the run was started.
  EXPECT_EQ(CurrentFlags(*parsed),
            (std::vector<std::pair<std::string, std::string>>{
                {"epochs", "10"},
                {"learning_rate", "0"},
                {"model", "mlp"},
                {"server_flags", "--a=1 --b=2"}}));
  EXPECT_TRUE(WasExtended(*parsed));
  parsed->segments.pop_back();
  EXPECT_FALSE(WasExtended(*parsed));
}

TEST(RunDirectoryTest, RejectsMalformedRecords) {
  EXPECT_THAT(
      ParseRunRecord("state running\nsegment 2 start x\n").status().message(),
      HasSubstr("line 2: not a segment 1"));
  EXPECT_THAT(
      ParseRunRecord("state running\nsegment 1 restart x\n").status().message(),
      HasSubstr("not a segment 1 (start, resume or extend)"));
  EXPECT_THAT(ParseRunRecord("state running\nsegment_flag epochs=2\n")
                  .status()
                  .message(),
              HasSubstr("segment_flag before a segment"));
  EXPECT_THAT(ParseRunRecord("state running\nsegment_end finished\n")
                  .status()
                  .message(),
              HasSubstr("segment_end before a segment"));
  EXPECT_FALSE(ParseRunRecord("job_id x\n").ok());  // No state.
  EXPECT_THAT(ParseRunRecord("state running\nsize 3\n").status().message(),
              HasSubstr("line 2: unknown key 'size'"));
  EXPECT_THAT(ParseRunRecord("state running\nflag =3\n").status().message(),
              HasSubstr("NAME=VALUE"));
}

TEST(RunDirectoryTest, ANewRunNeedsAnEmptyPlaceAndResumeARun) {
  const std::string dir = UnusedTestPath("run");
  {
    absl::StatusOr<std::unique_ptr<RunDirectory>> run =
        RunDirectory::Create(dir);
    ASSERT_TRUE(run.ok()) << run.status();
    RunRecord record;
    record.job_id = "j";
    ASSERT_TRUE((*run)->Write(record).ok());
    // Held: a second launcher cannot open it meanwhile.
    EXPECT_THAT(RunDirectory::Open(dir).status().message(),
                HasSubstr("in use by another launcher"));
  }
  EXPECT_THAT(RunDirectory::Create(dir).status().message(),
              HasSubstr("holds a run already: resume it with --resume="));
  absl::StatusOr<std::unique_ptr<RunDirectory>> run = RunDirectory::Open(dir);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ((*run)->Read()->job_id, "j");
  EXPECT_THAT(RunDirectory::Open(UnusedTestPath("none")).status().message(),
              HasSubstr("holds no run"));
}

TEST(RunDirectoryTest, KeepsTheCheckpointsAsTheyAre) {
  const std::string dir = UnusedTestPath("keep");
  EXPECT_TRUE(absl::IsNotFound(KeepCheckpoints(dir, "before").status()));
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(absl::IsNotFound(KeepCheckpoints(dir, "before").status()));
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(absl::StrCat(dir, "/", name)) << text;
  };
  write("shard-0-15.ckpt", "fifteen");
  write(".write-check-0", "");
  absl::StatusOr<int> kept = KeepCheckpoints(dir, "before-segment-2");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, 1);
  // What the servers do next: a new checkpoint under the same name (a
  // rename over it) and the old one deleted.
  write("shard-0-15.ckpt.tmp", "changed");
  std::filesystem::rename(dir + "/shard-0-15.ckpt.tmp",
                          dir + "/shard-0-15.ckpt");
  std::filesystem::remove(dir + "/shard-0-15.ckpt");
  std::ifstream in(dir + "/before-segment-2/shard-0-15.ckpt");
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "fifteen");
  EXPECT_FALSE(
      std::filesystem::exists(dir + "/before-segment-2/.write-check-0"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/.before-segment-2.partial"));
}

TEST(RunDirectoryTest, NamesSortByTime) {
  EXPECT_LT(NewRunName(absl::FromUnixSeconds(1000000000)),
            NewRunName(absl::FromUnixSeconds(1000000001)));
}

}  // namespace
}  // namespace ps
