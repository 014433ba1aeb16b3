#include "deploy/local/run_directory.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

std::string Fresh(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

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

TEST(RunDirectoryTest, RejectsMalformedRecords) {
  EXPECT_FALSE(ParseRunRecord("job_id x\n").ok());  // No state.
  EXPECT_THAT(ParseRunRecord("state running\nsize 3\n").status().message(),
              HasSubstr("line 2: unknown key 'size'"));
  EXPECT_THAT(ParseRunRecord("state running\nflag =3\n").status().message(),
              HasSubstr("NAME=VALUE"));
}

TEST(RunDirectoryTest, ANewRunNeedsAnEmptyPlaceAndResumeARun) {
  const std::string dir = Fresh("run");
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
  EXPECT_THAT(RunDirectory::Open(Fresh("none")).status().message(),
              HasSubstr("holds no run"));
}

TEST(RunDirectoryTest, NamesSortByTime) {
  EXPECT_LT(NewRunName(absl::FromUnixSeconds(1000000000)),
            NewRunName(absl::FromUnixSeconds(1000000001)));
}

}  // namespace
}  // namespace ps
