// The launcher heals a job: a worker and a server killed with SIGKILL mid-run
// are restarted (the server from its latest checkpoint, the worker where the
// servers recorded it), the job completes with every example counted once,
// and the run's directory holds the logs, the restarts and the curves. The
// real launcher, server and worker binaries on 127.0.0.1.

#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps {
namespace {

using ::ps::testing::RunfilePath;
using ::ps::testing::TempPath;
using ::testing::Contains;
using ::testing::HasSubstr;

// Generous bounds: only a hang reaches them.
constexpr absl::Duration kLineTimeout = absl::Seconds(120);
constexpr absl::Duration kJobTimeout = absl::Seconds(240);
constexpr int kBatch = 250;  // 60000 / 2 workers / 250: 120 steps an epoch.

std::unique_ptr<Subprocess> StartLauncher(std::vector<std::string> args) {
  SubprocessOptions options;
  options.argv = {
      RunfilePath("deploy/local/launch"),
      absl::StrCat("--server_binary=", RunfilePath("server/server")),
      absl::StrCat("--worker_binary=", RunfilePath("worker/worker"))};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.name = "launch";
  options.output_drain_timeout = kJobTimeout;
  // The launcher's children must see our lines too if this test fails.
  options.line_callback = [](absl::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  };
  absl::StatusOr<std::unique_ptr<Subprocess>> launch =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(launch.ok()) << launch.status();
  return launch.ok() ? *std::move(launch) : nullptr;
}

// The pid in the launcher's "started worker 1 (pid 123): ..." line.
int PidIn(const std::string& line) {
  const size_t at = line.find("(pid ");
  int pid = 0;
  if (at == std::string::npos ||
      !absl::SimpleAtoi(line.substr(at + 5, line.find(')', at) - at - 5),
                        &pid)) {
    ADD_FAILURE() << "no pid in: " << line;
  }
  return pid;
}

// Every "examples per epoch:" line the launcher streamed for `server`: the
// last is that server's final report.
std::string LastLineWith(const std::vector<std::string>& lines,
                         const std::string& text) {
  std::string found;
  for (const std::string& line : lines) {
    if (absl::StrContains(line, text)) found = line;
  }
  return found;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(LaunchRestartTest, KilledWorkerAndServerAreRestartedAndTheJobCompletes) {
  const std::string run_dir = TempPath("restart_run");
  std::filesystem::remove_all(run_dir);
  std::unique_ptr<Subprocess> launch = StartLauncher({
      "--num_servers=2",
      "--num_workers=2",
      "--epochs=1",
      absl::StrCat("--batch_size=", kBatch),
      "--optimizer=sgd",
      "--learning_rate=0.05",
      "--log_every=5",
      "--output=stream",
      absl::StrCat("--run_dir=", run_dir),
      "--restart_backoff=200ms",
      // A checkpoint every 10 updates, so that the killed server has one;
      // a dead worker is noticed soon, but not so soon that a live one on
      // a loaded machine is taken for dead.
      "--server_flags=--checkpoint_every_steps=1 --worker_timeout=4s",
      // Steps slow enough that the kills land mid-epoch.
      "--worker_flags=--slowdown_ms=80 --heartbeat_period=200ms",
  });
  ASSERT_NE(launch, nullptr);

  // Worker 1 dies after 10 of its 120 steps.
  absl::StatusOr<std::string> started =
      launch->WaitForOutputLine("started worker 1 (pid", kLineTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(launch
                  ->WaitForOutputLine("[worker 1] info: epoch 1/1 step 10/",
                                      kLineTimeout)
                  .ok());
  ASSERT_EQ(kill(PidIn(*started), SIGKILL), 0);

  // Once it is back and has trained on, server 0 dies.
  ASSERT_TRUE(
      launch->WaitForOutputLine("restarted worker 1", kLineTimeout).ok());
  ASSERT_TRUE(
      launch->WaitForOutputLine("[worker 1] info: resuming at", kLineTimeout)
          .ok());
  ASSERT_TRUE(launch
                  ->WaitForOutputLine("[worker 0] info: epoch 1/1 step 50/",
                                      kLineTimeout)
                  .ok());
  absl::StatusOr<std::string> server =
      launch->WaitForOutputLine("started server 0 (pid", kLineTimeout);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ(kill(PidIn(*server), SIGKILL), 0);

  std::optional<ExitStatus> exit = launch->WaitFor(kJobTimeout);
  ASSERT_TRUE(exit.has_value()) << "the launcher did not finish";
  EXPECT_TRUE(exit->success()) << exit->ToString();
  const std::vector<std::string> lines = launch->OutputLines();
  EXPECT_THAT(lines, Contains("[launch] result: success"));
  EXPECT_THAT(lines, Contains("[launch] restarts: 2 of --max_restarts=3"));
  EXPECT_THAT(LastLineWith(lines, "[launch]   worker 1 at "),
              HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_THAT(LastLineWith(lines, "[launch]   server 0 at "),
              HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_THAT(LastLineWith(lines, "restarted server 0"),
              HasSubstr("from its latest checkpoint"));

  // Server 1 counted every training example exactly once in the epoch,
  // although worker 1 died and resumed. Server 0 restored its counts with
  // its checkpoint (one every update here) and counted on: no example twice;
  // short only of what the restart lost on that shard, the updates it
  // reports as lost and the step in flight at the kill (a push it had taken
  // but not checkpointed, whose worker had moved on: "takes part with
  // weight 0").
  EXPECT_THAT(LastLineWith(lines, "[server 1] examples per epoch:"),
              HasSubstr("examples per epoch: 0=60000"));
  const std::string counted =
      LastLineWith(lines, "[server 0] examples per epoch: 0=");
  const std::string lost =
      LastLineWith(lines, "[server 0] updates lost in restarts: ");
  int64_t examples = 0, updates_lost = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(counted.substr(counted.find("0=") + 2), &examples))
      << counted;
  ASSERT_TRUE(absl::SimpleAtoi(lost.substr(lost.rfind(' ') + 1), &updates_lost))
      << lost;
  EXPECT_LE(examples, 60000);
  EXPECT_GE(examples, 60000 - (updates_lost + 1) * 2 * kBatch);
  std::printf("restarted server 0: %ld examples counted, %ld updates lost\n",
              static_cast<long>(examples), static_cast<long>(updates_lost));

  // The run's directory: each process's log across its restarts, the
  // record, the curves.
  const std::string server_log = ReadFile(run_dir + "/logs/server-0.log");
  EXPECT_EQ(std::vector<std::string>(
                absl::StrSplit(server_log, "[launch] started server 0"))
                    .size() -
                1,
            2u);
  EXPECT_THAT(server_log, HasSubstr("restored"));
  EXPECT_THAT(ReadFile(run_dir + "/logs/worker-1.log"),
              HasSubstr("resuming at epoch 1"));
  EXPECT_THAT(ReadFile(run_dir + "/run.txt"), HasSubstr("state finished"));
  const std::string csv = ReadFile(run_dir + "/curves.csv");
  EXPECT_THAT(csv, HasSubstr("epoch,train_loss,test_accuracy\n1,"));
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
  std::unique_ptr<Subprocess> launch =
      StartLauncher({absl::StrCat("--resume=", run_dir)});
  ASSERT_NE(launch, nullptr);
  std::optional<ExitStatus> exit = launch->WaitFor(kLineTimeout);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 2) << exit->ToString();
  EXPECT_THAT(launch->LastLines(1), HasSubstr("already finished (final test "
                                              "accuracy 0.8000): nothing to "
                                              "resume"));
  // A new run in its directory is refused too, pointing at --resume.
  launch = StartLauncher({absl::StrCat("--run_dir=", run_dir)});
  ASSERT_NE(launch, nullptr);
  exit = launch->WaitFor(kLineTimeout);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code(), 2) << exit->ToString();
  EXPECT_THAT(launch->LastLines(1), HasSubstr("holds a run already"));
}

}  // namespace
}  // namespace ps
