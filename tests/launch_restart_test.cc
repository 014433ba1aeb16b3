// The launcher heals a job: a worker and a server killed with SIGKILL mid-run
// are restarted (the server from its latest checkpoint, the worker where the
// servers recorded it), the job completes with every example counted once,
// and the run's directory holds the logs, the restarts and the curves. The
// real launcher, server and worker binaries on 127.0.0.1.
//
// The job cannot end before the test has done its kills, however loaded the
// machine: it plans more epochs than it could train in days, and after the
// kills it is stopped (SIGINT, as Ctrl-C) and extended (launch --extend) to
// end with the epoch it is in.

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "common/temp_dir_testing.h"
#include "deploy/local/run_directory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard_report.h"
#include "tests/cluster_runner.h"

namespace ps {
namespace {

using ::ps::testing::LauncherRun;
using ::ps::testing::PidInStartedLine;
using ::ps::testing::ReadTestFile;
using ::ps::testing::RunfilePath;
using ::ps::testing::TempPath;
using ::testing::Contains;
using ::testing::HasSubstr;

// Generous bounds: only a hang reaches them.
constexpr absl::Duration kLineTimeout = absl::Seconds(120);
constexpr absl::Duration kJobTimeout = absl::Seconds(240);
constexpr int kBatch = 250;  // 60000 / 2 workers / 250: 120 steps an epoch.
constexpr int kExamples = 60000;

std::string WorkerBinaryFlag() {
  return absl::StrCat("--worker_binary=", RunfilePath("worker/worker"));
}

// The last of `lines` that contains `text`, or "".
std::string LastLineWith(const std::vector<std::string>& lines,
                         const std::string& text) {
  std::string found;
  for (const std::string& line : lines) {
    if (absl::StrContains(line, text)) found = line;
  }
  return found;
}

// The highest epoch (1-based) of the workers' "epoch E/N step ..." lines.
int LastEpochIn(const std::vector<std::string>& lines) {
  int last = 0;
  for (const std::string& line : lines) {
    const size_t at = line.find("] info: epoch ");
    int epoch = 0;
    if (at != std::string::npos &&
        absl::SimpleAtoi(line.substr(at + 14, line.find('/', at) - at - 14),
                         &epoch)) {
      last = std::max(last, epoch);
    }
  }
  return last;
}

// Server `index`'s report from its last exit, written into the run's
// directory by the launcher's flag; a failure if there is none.
server::ShardReport ReportOf(const std::string& run_dir, int index) {
  absl::StatusOr<server::ShardReport> report =
      server::ReadShardReport(ServerReportFile(run_dir, index));
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : server::ShardReport();
}

// Its examples per epoch, in epoch order.
std::vector<int64_t> ExamplesPerEpoch(const server::ShardReport& report) {
  std::vector<int64_t> counts;
  for (const auto& [epoch, examples] : report.examples_per_epoch) {
    counts.push_back(static_cast<int64_t>(examples));
  }
  return counts;
}

TEST(LaunchRestartTest, KilledWorkerAndServerAreRestartedAndTheJobCompletes) {
  const std::string run_dir = TempPath("restart_run");
  std::filesystem::remove_all(run_dir);
  std::unique_ptr<Subprocess> launch = ::ps::testing::StartLauncher(
      {
          WorkerBinaryFlag(),
          "--num_servers=2",
          "--num_workers=2",
          // Far more than it trains: it ends when the test extends it so.
          "--epochs=100000",
          absl::StrCat("--batch_size=", kBatch),
          "--optimizer=sgd",
          "--learning_rate=0.05",
          "--log_every=5",
          "--output=stream",
          absl::StrCat("--run_dir=", run_dir),
          "--restart_backoff=200ms",
          // A checkpoint every update, so that the killed server has one; a
          // dead worker is noticed soon, but not so soon that a live one on
          // a loaded machine is taken for dead.
          "--server_flags=--checkpoint_every_steps=1 --worker_timeout=4s",
          "--worker_flags=--heartbeat_period=200ms",
      },
      kJobTimeout);
  ASSERT_NE(launch, nullptr);

  // Worker 1 dies after 10 of its steps.
  absl::StatusOr<std::string> started =
      launch->WaitForOutputLine("started worker 1 (pid", kLineTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(launch
                  ->WaitForOutputLine(
                      "[worker 1] info: epoch 1/100000 step 10/", kLineTimeout)
                  .ok());
  ASSERT_EQ(kill(PidInStartedLine(*started), SIGKILL), 0);

  // Once it is back and has trained on, server 0 dies.
  ASSERT_TRUE(
      launch->WaitForOutputLine("restarted worker 1", kLineTimeout).ok());
  ASSERT_TRUE(
      launch->WaitForOutputLine("[worker 1] info: resuming at", kLineTimeout)
          .ok());
  ASSERT_TRUE(launch
                  ->WaitForOutputLine(
                      "[worker 0] info: epoch 1/100000 step 50/", kLineTimeout)
                  .ok());
  absl::StatusOr<std::string> server =
      launch->WaitForOutputLine("started server 0 (pid", kLineTimeout);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ(kill(PidInStartedLine(*server), SIGKILL), 0);

  // Once it is back and both workers are past the first epoch, Ctrl-C.
  ASSERT_TRUE(
      launch->WaitForOutputLine("restarted server 0", kLineTimeout).ok());
  for (const char* worker : {"[worker 0]", "[worker 1]"}) {
    ASSERT_TRUE(launch
                    ->WaitForOutputLine(
                        absl::StrCat(worker, " info: epoch 2/100000 step 5/"),
                        kLineTimeout)
                    .ok());
  }
  ASSERT_EQ(kill(launch->pid(), SIGINT), 0);
  std::optional<ExitStatus> exit = launch->WaitFor(kJobTimeout);
  ASSERT_TRUE(exit.has_value()) << "the launcher did not stop";
  EXPECT_EQ(exit->exit_code(), 128 + SIGINT) << exit->ToString();
  const std::vector<std::string> lines = launch->OutputLines();
  EXPECT_THAT(lines, Contains("[launch] restarts: 2 of --max_restarts=3"));
  EXPECT_THAT(LastLineWith(lines, "[launch]   worker 1 at "),
              HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_THAT(LastLineWith(lines, "[launch]   server 0 at "),
              HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_THAT(LastLineWith(lines, "restarted server 0"),
              HasSubstr("from its latest checkpoint"));
  EXPECT_THAT(ReadTestFile(run_dir + "/run.txt"), HasSubstr("state stopped"));
  // Server 0's report at the stop: the process that restored after the
  // kill replayed the update log, so it lost nothing.
  const server::ShardReport restarted = ReportOf(run_dir, 0);
  EXPECT_TRUE(restarted.updates_replayed.has_value());
  EXPECT_EQ(restarted.updates_lost, std::optional<uint64_t>(0));

  // The job ends with the epoch it is in (it may have moved into the next
  // without a line yet).
  const int epochs = LastEpochIn(lines) + 1;
  ASSERT_GE(epochs, 3);
  const LauncherRun extended = ::ps::testing::RunLauncher(
      {WorkerBinaryFlag(), absl::StrCat("--extend=", run_dir),
       absl::StrCat("--epochs=", epochs), "--output=stream"},
      kJobTimeout);
  ASSERT_TRUE(extended.exit.success()) << extended.exit.ToString();
  EXPECT_THAT(extended.lines, Contains("[launch] result: success"));

  // Server 1 counted every training example exactly once in every epoch,
  // although worker 1 died and resumed, and the job was stopped and
  // extended. Server 0 restored its counts with its checkpoint (one every
  // update here) and replayed its update log: every example exactly once
  // too (without the log it would be short of the updates it reports as
  // lost and the step in flight at the kill).
  const std::vector<int64_t> server_1 = ExamplesPerEpoch(ReportOf(run_dir, 1));
  EXPECT_EQ(server_1, std::vector<int64_t>(epochs, kExamples));
  const server::ShardReport extended_0 = ReportOf(run_dir, 0);
  const std::vector<int64_t> server_0 = ExamplesPerEpoch(extended_0);
  EXPECT_EQ(server_0, std::vector<int64_t>(epochs, kExamples));
  ASSERT_EQ(server_0.size(), static_cast<size_t>(epochs));
  int64_t missing = 0;
  for (int64_t count : server_0) {
    EXPECT_LE(count, kExamples);
    missing += kExamples - count;
  }
  // Its reports before the stop and after: a restart's losses are its own
  // (the process killed wrote none).
  const int64_t updates_lost = static_cast<int64_t>(
      restarted.updates_lost.value_or(0) + extended_0.updates_lost.value_or(0));
  EXPECT_EQ(extended_0.updates_lost, std::optional<uint64_t>(0));
  EXPECT_LE(missing, (updates_lost + 1) * 2 * kBatch);
  std::printf(
      "restarted server 0: %ld examples missing in %d epochs, %ld updates "
      "lost\n",
      static_cast<long>(missing), epochs, static_cast<long>(updates_lost));

  // The run's directory: each process's log across its restarts and the
  // extension, the record, the curves.
  const std::string server_log = ReadTestFile(run_dir + "/logs/server-0.log");
  EXPECT_EQ(std::vector<std::string>(
                absl::StrSplit(server_log, "[launch] started server 0"))
                    .size() -
                1,
            3u);
  EXPECT_THAT(server_log, HasSubstr("restored"));
  EXPECT_THAT(ReadTestFile(run_dir + "/logs/worker-1.log"),
              HasSubstr("resuming at epoch 1"));
  const std::string record = ReadTestFile(run_dir + "/run.txt");
  EXPECT_THAT(record, HasSubstr("state finished"));
  EXPECT_THAT(record, HasSubstr("\nsegment_end stopped: "));
  EXPECT_THAT(record, HasSubstr(absl::StrCat("\nsegment_flag epochs=", epochs,
                                             "\nsegment_end finished: ")));
  const std::string csv = ReadTestFile(run_dir + "/curves.csv");
  EXPECT_THAT(csv, HasSubstr("epoch,train_loss,test_accuracy\n1,"));
  EXPECT_THAT(csv, HasSubstr(absl::StrCat("\n", epochs, ",")));
}

TEST(LaunchRestartTest, AFinishedRunIsRefusedAtOnceOnResume) {
  const std::string run_dir = TempPath("finished_run");
  std::filesystem::remove_all(run_dir);
  std::filesystem::create_directories(run_dir);
  {
    std::ofstream record(run_dir + "/run.txt");
    record << "job_id launch-1-2\nstate finished\noutcome final test "
              "accuracy 0.8000\nflag epochs=1\n";
  }
  // A run.txt of a launcher that kept no segments.
  LauncherRun launch = ::ps::testing::RunLauncher(
      {WorkerBinaryFlag(), absl::StrCat("--resume=", run_dir)}, kLineTimeout);
  EXPECT_EQ(launch.exit.exit_code(), 2) << launch.exit.ToString();
  ASSERT_FALSE(launch.lines.empty());
  EXPECT_THAT(launch.lines.back(),
              HasSubstr("already finished (final test accuracy 0.8000): "
                        "nothing to resume. To train it further: --extend="));
  // A new run in its directory is refused too, pointing at --resume.
  launch = ::ps::testing::RunLauncher(
      {WorkerBinaryFlag(), absl::StrCat("--run_dir=", run_dir)}, kLineTimeout);
  EXPECT_EQ(launch.exit.exit_code(), 2) << launch.exit.ToString();
  ASSERT_FALSE(launch.lines.empty());
  EXPECT_THAT(launch.lines.back(), HasSubstr("holds a run already"));
}

}  // namespace
}  // namespace ps
