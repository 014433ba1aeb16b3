// A pipeline stage killed with SIGKILL mid-run (issue 34): the real
// launcher, server and worker binaries on 127.0.0.1, one replica of 2
// stages in sync mode with checkpoints. The launcher restarts the killed
// stage and its neighbour, whose step failed on the closed link; both
// resume at the step the servers had not applied, which they train again,
// and the job ends with the weights of a run that nobody disturbed, bit
// for bit.
//
// The last stage is the one killed. It pushes a step's gradients as soon
// as it has sent its last gradients back, before the first stage can push
// its own, so the first stage is never waiting at the servers for a push
// that the dead stage will not make. Killing the first stage can catch the
// last one in that wait (README.md, the fault table: "a pipeline stage
// killed").
//
// The kill is triggered by the last stage's progress line, and the job
// plans hundreds of steps beyond it, so it cannot end before the kill.

#include <signal.h>

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

  // Both rejoin at the step the first stage was in: the step in flight is
  // trained again, by both stages; nothing else is.
  for (const char* worker : {"worker 0 rejoined", "worker 1 rejoined"}) {
    const std::string rejoined = LineWith(lines, worker);
    EXPECT_EQ(NumberAfter(rejoined, "it resumes at step "), failed_step)
        << rejoined;
    EXPECT_EQ(NumberAfter(rejoined, "examples_done "), failed_step * 32)
        << rejoined;
  }
  EXPECT_THAT(lines, Contains("[server 0] updates lost in restarts: 0"));

  // And the job ends where the undisturbed one did.
  const std::string want = ReadTestFile(TempPath("undisturbed.model"));
  const std::string got = ReadTestFile(TempPath("killed.model"));
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(got == want) << "the final weights differ from the undisturbed "
                              "run's";
}

}  // namespace
}  // namespace ps
