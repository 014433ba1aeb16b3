// A pipeline stage killed with SIGKILL mid-run (issue 34): the real
// launcher, server and worker binaries on 127.0.0.1, one replica of 2
// stages in sync mode with checkpoints. The launcher restarts the killed
// stage and its neighbour, whose step failed on the closed link; both
// resume at the step the servers had not applied, which they train again,
// and the job ends with the weights of a run that nobody disturbed, bit
// for bit.
//
// The last stage is the one killed; each stage's server group holds its
// own steps, so the two groups' records may differ by the step the dead
// stage had not pushed yet, and the stages agree on the earlier.
//
// The kill is triggered by the last stage's progress line, and the job
// plans hundreds of steps beyond it, so it cannot end before the kill.

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/sync_equivalence.h"

namespace ps {
namespace {

using ::ps::testing::LineWith;
using ::ps::testing::PidInStartedLine;
using ::ps::testing::ReadTestFile;
using ::ps::testing::RunfilePath;
using ::ps::testing::TempPath;
using ::testing::Contains;
using ::testing::HasSubstr;

// Generous bounds: only a hang reaches them.
constexpr absl::Duration kLineTimeout = absl::Seconds(240);
constexpr absl::Duration kJobTimeout = absl::Seconds(600);
// The kill follows this step's line; the job trains many more.
constexpr int kKillAfterStep = 20;
constexpr int kSteps = 500;

std::vector<std::string> JobFlags(const std::string& name) {
  return {
      absl::StrCat("--worker_binary=", RunfilePath("worker/worker")),
      "--num_servers=1",
      "--num_workers=2",
      "--pipeline_stages=2",
      "--micro_batches=2",
      absl::StrCat("--model=", ::ps::testing::kSmallCnnModel),
      "--batch_size=32",
      "--epochs=1",
      absl::StrCat("--max_steps=", kSteps),
      "--optimizer=sgd",
      "--learning_rate=0.05",
      "--log_every=1",
      "--output=stream",
      "--restart_backoff=200ms",
      // The restarted stages rejoin long before the servers would go on
      // without them, however loaded the machine.
      "--server_flags=--checkpoint_every_steps=10 --worker_timeout=120s",
      absl::StrCat("--run_dir=", TempPath(name)),
      absl::StrCat("--save_model=", TempPath(name + ".model")),
  };
}

// The number after `prefix` in `line` (up to a non-digit), or -1.
int64_t NumberAfter(const std::string& line, absl::string_view prefix) {
  const size_t at = line.find(std::string(prefix));
  if (at == std::string::npos) return -1;
  const size_t start = at + prefix.size();
  size_t end = start;
  while (end < line.size() && absl::ascii_isdigit(line[end])) ++end;
  int64_t n = -1;
  if (!absl::SimpleAtoi(line.substr(start, end - start), &n)) return -1;
  return n;
}

TEST(PipelineStageKillTest, AKilledStageIsRestartedAndTheStepInFlightRepeated) {
  const ::ps::testing::LauncherRun undisturbed =
      ::ps::testing::RunLauncher(JobFlags("undisturbed"), kJobTimeout);
  ASSERT_TRUE(undisturbed.exit.success()) << undisturbed.exit.ToString();

  std::unique_ptr<Subprocess> launch =
      ::ps::testing::StartLauncher(JobFlags("killed"), kJobTimeout);
  ASSERT_NE(launch, nullptr);
  absl::StatusOr<std::string> started =
      launch->WaitForOutputLine("started worker 1 (pid", kLineTimeout);
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(launch
                  ->WaitForOutputLine(absl::StrCat("[worker 1] info: epoch 1/1 "
                                                   "step ",
                                                   kKillAfterStep, "/"),
                                      kLineTimeout)
                  .ok());
  ASSERT_EQ(kill(PidInStartedLine(*started), SIGKILL), 0);
  std::optional<ExitStatus> exit = launch->WaitFor(kJobTimeout);
  ASSERT_TRUE(exit.has_value()) << "the job did not end";
  EXPECT_TRUE(exit->success()) << exit->ToString();
  const std::vector<std::string> lines = launch->OutputLines();

  // The killed stage and its neighbour, whose step failed naming it.
  EXPECT_THAT(lines, Contains("[launch] restarts: 2 of --max_restarts=3"));
  EXPECT_THAT(LineWith(lines, "[launch]   worker 1 at "),
              HasSubstr("killed by signal 9 (SIGKILL)"));
  const std::string failed = LineWith(lines, "[worker 0] error: ABORTED");
  EXPECT_THAT(failed, HasSubstr("from stage 1 (rank 1) failed, it died"));
  // "epoch 1 step N:" counts from 1, the servers' steps from 0.
  const int64_t failed_step = NumberAfter(failed, "epoch 1 step ") - 1;
  EXPECT_GE(failed_step, kKillAfterStep) << failed;

  // Both rejoin, each with its stage's server group (where each is worker
  // 0, the replica), where the group recorded it, and the stages train from
  // the earlier of the two: the step the first stage was in, or the one
  // before it if the last stage died between sending its last gradients and
  // pushing (its group then had not applied it; the other group
  // acknowledges its repeated push without applying it again). That step
  // in flight is trained again, by both stages; nothing else is.
  std::vector<int64_t> resumed;
  for (const std::string& line : lines) {
    if (!absl::StrContains(line, "warning: worker 0 rejoined")) continue;
    const int64_t step = NumberAfter(line, "it resumes at step ");
    resumed.push_back(step);
    EXPECT_EQ(NumberAfter(line, "examples_done "), step * 32) << line;
  }
  ASSERT_EQ(resumed.size(), 2u);
  const int64_t repeated = std::min(resumed[0], resumed[1]);
  EXPECT_LE(std::max(resumed[0], resumed[1]), failed_step);
  EXPECT_GE(repeated, failed_step - 1);
  EXPECT_THAT(lines, Contains("[server 0] updates lost in restarts: 0"));
  EXPECT_THAT(lines, Contains("[server 1] updates lost in restarts: 0"));

  // And the job ends where the undisturbed one did.
  const std::string want = ReadTestFile(TempPath("undisturbed.model"));
  const std::string got = ReadTestFile(TempPath("killed.model"));
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(got == want) << "the final weights differ from the undisturbed "
                              "run's";
}

}  // namespace
}  // namespace ps
