// A finished run is trained further with launch --extend: its epochs go on
// numbering from its checkpoints, every example counts once in the new
// epoch, run.txt records the segment and the curves go on. Extensions that
// would change what the checkpoints hold are refused before anything
// starts and leave the run as it was. The real launcher, server and worker
// binaries on 127.0.0.1.

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/temp_dir_testing.h"
#include "deploy/local/run_directory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard_report.h"
#include "tests/cluster_runner.h"

namespace ps {
namespace {

using ::ps::testing::LauncherRun;
using ::ps::testing::LineWith;
using ::ps::testing::ReadTestFile;
using ::ps::testing::RunfilePath;
using ::ps::testing::TempPath;
using ::testing::Contains;
using ::testing::HasSubstr;

// Generous: only a hang reaches it.
constexpr absl::Duration kLaunchTimeout = absl::Seconds(240);

// Every file directly in `dir`, by name, with its bytes.
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) {
      files[entry.path().filename().string()] =
          ReadTestFile(entry.path().string());
    }
  }
  return files;
}

// Our worker with 2 servers and 2 workers at batch 2000: 15 steps an epoch.
LauncherRun Launch(std::vector<std::string> args) {
  args.insert(args.begin(),
              {absl::StrCat("--worker_binary=", RunfilePath("worker/worker")),
               "--output=stream", "--log_every=5"});
  return ::ps::testing::RunLauncher(std::move(args), kLaunchTimeout);
}

TEST(LaunchExtendTest, AFinishedRunTrainsOnForAnotherEpoch) {
  const std::string run_dir = TempPath("extended_run");
  const std::string checkpoints = run_dir + "/checkpoints";
  std::filesystem::remove_all(run_dir);
  LauncherRun first = Launch(
      {"--num_servers=2", "--num_workers=2", "--epochs=1", "--batch_size=2000",
       "--lr_schedule=cosine", absl::StrCat("--run_dir=", run_dir)});
  ASSERT_TRUE(first.exit.success()) << first.exit.ToString();
  ASSERT_THAT(ReadTestFile(run_dir + "/run.txt"), HasSubstr("state finished"));
  const std::string record = ReadTestFile(run_dir + "/run.txt");
  const std::map<std::string, std::string> finished = Files(checkpoints);
  // Per shard: the fresh shard's checkpoint, the final one, and the update
  // log file that follows each.
  std::vector<std::string> names;
  for (const auto& [name, bytes] : finished) names.push_back(name);
  ASSERT_EQ(names, (std::vector<std::string>{
                       "shard-0-0.ckpt", "shard-0-0.wal", "shard-0-15.ckpt",
                       "shard-0-15.wal", "shard-1-0.ckpt", "shard-1-0.wal",
                       "shard-1-15.ckpt", "shard-1-15.wal"}));

  // Refused at once, naming the flag and why; the run stays as it was.
  const struct {
    std::vector<std::string> args;
    std::string says;
  } refusals[] = {
      {{"--epochs=2", "--model=784-64-10"},
       "--model=784-64-10: an extended run keeps its --model=784-256-128-10, "
       "since the checkpoints hold the run's model"},
      {{"--epochs=2", "--num_servers=3"},
       "an extended run keeps its --num_servers=2, since the checkpoints hold "
       "the model split over the run's servers"},
      {{"--epochs=2", "--mode=async"},
       "an extended run keeps its --mode=sync, since the checkpoints are of "
       "the run's consistency mode"},
      {{"--epochs=2", "--batch_size=1000"}, "keeps its --batch_size=2000"},
      {{"--learning_rate=0.0005"},
       "finished the 1 epoch it planned: extending it needs more, "
       "--epochs=N with N > 1"},
      {{"--epochs=2", absl::StrCat("--resume=", run_dir)},
       "--resume and --extend both name a run: give one"},
  };
  for (const auto& refusal : refusals) {
    std::vector<std::string> args = refusal.args;
    args.push_back(absl::StrCat("--extend=", run_dir));
    const LauncherRun refused = Launch(args);
    const std::string said = absl::StrJoin(refused.lines, "\n");
    EXPECT_EQ(refused.exit.exit_code(), 2) << said;
    EXPECT_THAT(said, HasSubstr(refusal.says));
    EXPECT_EQ(ReadTestFile(run_dir + "/run.txt"), record) << refusal.says;
    EXPECT_EQ(Files(checkpoints), finished) << refusal.says;
    EXPECT_FALSE(std::filesystem::exists(checkpoints + "/before-segment-2"));
  }
  const LauncherRun resumed = Launch({absl::StrCat("--resume=", run_dir)});
  EXPECT_EQ(resumed.exit.exit_code(), 2);
  EXPECT_THAT(absl::StrJoin(resumed.lines, "\n"),
              HasSubstr("already finished (final test accuracy"));
  EXPECT_THAT(absl::StrJoin(resumed.lines, "\n"),
              HasSubstr("To train it further: --extend="));

  // One more epoch, at another learning rate.
  const LauncherRun extended = Launch({absl::StrCat("--extend=", run_dir),
                                       "--epochs=2", "--learning_rate=0.0005"});
  ASSERT_TRUE(extended.exit.success()) << extended.exit.ToString();
  const std::vector<std::string>& lines = extended.lines;
  EXPECT_THAT(LineWith(lines, "[launch] extending run "),
              HasSubstr("2 epochs of 784-256-128-10"));
  EXPECT_THAT(LineWith(lines, "[launch] from its checkpoints, with "),
              HasSubstr("--epochs=2 (was 1), --learning_rate=0.0005 (was 0)"));
  // The servers take the finished run and the workers' new plan.
  EXPECT_NE(LineWith(lines, "[server 0] info: --extend: ",
                     "is of a finished run (version 15, 15 planned steps)"),
            "");
  EXPECT_NE(LineWith(lines, "[server 1] info: worker ",
                     "plans 30 steps where the restored run planned 15"),
            "");
  // The epochs go on numbering.
  for (const char* worker : {"[worker 0]", "[worker 1]"}) {
    EXPECT_NE(LineWith(lines, worker, "info: resuming at epoch 2 step 1"), "");
    EXPECT_NE(LineWith(lines, worker, "info: epoch 2/2 step 15/15 loss"), "");
    EXPECT_EQ(LineWith(lines, worker, "info: epoch 1/2 step"), "");
  }
  // Each server counted every example once in the new epoch, as in the
  // first (restored with its checkpoint): its report in the run directory.
  for (int s = 0; s < 2; ++s) {
    absl::StatusOr<server::ShardReport> report =
        server::ReadShardReport(ServerReportFile(run_dir, s));
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->examples_per_epoch,
              (std::map<uint64_t, uint64_t>{{0, 60000}, {1, 60000}}))
        << "server " << s;
  }
  EXPECT_THAT(lines, Contains("[launch] result: success"));

  // run.txt: the run's start, then the extension with what it changed.
  const std::string after = ReadTestFile(run_dir + "/run.txt");
  EXPECT_THAT(after, HasSubstr("state finished\n"));
  EXPECT_THAT(after, HasSubstr("flag epochs=1\n"));
  EXPECT_THAT(after, HasSubstr("\nsegment_end finished: final test accuracy"));
  EXPECT_THAT(after, HasSubstr(" extend "));
  EXPECT_THAT(after.substr(after.find(" extend ")),
              HasSubstr("\nsegment_flag epochs=2\n"
                        "segment_flag learning_rate=0.0005\n"
                        "segment_end finished: final test accuracy"));
  // The curves go on; the finished run's checkpoints are kept as they were.
  const std::string csv = ReadTestFile(run_dir + "/curves.csv");
  EXPECT_THAT(csv, HasSubstr("\n1,"));
  EXPECT_THAT(csv, HasSubstr("\n2,"));
  EXPECT_EQ(Files(checkpoints + "/before-segment-2"), finished);
}

}  // namespace
}  // namespace ps
