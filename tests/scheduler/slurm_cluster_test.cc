// The Slurm fixture against Debian's real Slurm: tasks of `srun` learn their
// place through the client library, a half-set environment is the library's
// clear error, and the fixture leaves nothing running. Skips (saying why)
// where Slurm cannot be started (not root, not installed).

#include "tests/scheduler/slurm_cluster.h"

#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/subprocess.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/scheduler/scheduler_testing.h"

namespace ps::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;

// Bounds a hang only: a step takes well under a second.
constexpr absl::Duration kTimeout = absl::Seconds(120);

// The servers' variables the client library wants beside the ranks; no
// server is reached.
const std::vector<std::pair<std::string, std::string>> kServerVariables = {
    {"PS_SERVERS", "127.0.0.1:1"}, {"PS_NUM_SERVERS", "1"}};

class SlurmClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = SlurmCluster::WhyUnavailable(); !why.empty()) {
      GTEST_SKIP() << "no Slurm here: " << why;
    }
    absl::StatusOr<std::unique_ptr<SlurmCluster>> cluster =
        SlurmCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  // Runs `srun --ntasks=NUM_TASKS ARGV...` to its end.
  ExitStatus Srun(int num_tasks, std::vector<std::string> argv) {
    SubprocessOptions options =
        cluster_->SrunOptions("srun", num_tasks, std::move(argv));
    options.env.insert(options.env.end(), kServerVariables.begin(),
                       kServerVariables.end());
    return RunToEnd(std::move(options), kTimeout);
  }

  std::unique_ptr<SlurmCluster> cluster_;
};

TEST_F(SlurmClusterTest, EachTaskOfSrunIsOneWorkerOfTheJob) {
  const std::string out = FreshTestDir("places");
  const ExitStatus exit =
      Srun(3, {RunfilePath("tests/scheduler/place_program"), out});
  EXPECT_TRUE(exit.success()) << exit.ToString();
  // "RANK NUM_WORKERS LOCAL_RANK LOCAL_NUM_WORKERS": one node runs all.
  EXPECT_THAT(FilesIn(out), ElementsAre(Pair("place-0", "0 3 0 3"),
                                        Pair("place-1", "1 3 1 3"),
                                        Pair("place-2", "2 3 2 3")));
}

TEST_F(SlurmClusterTest, AHalfSetEnvironmentIsAnErrorNamingWhatIsMissing) {
  const std::string out = FreshTestDir("errors");
  const ExitStatus exit =
      Srun(2, {"/usr/bin/env", "-u", "SLURM_NTASKS", "-u", "SLURM_LOCALID",
               RunfilePath("tests/scheduler/place_program"), out});
  EXPECT_EQ(exit, ExitStatus::Exited(kExitBadConfig));
  const std::map<std::string, std::string> files = FilesIn(out);
  ASSERT_EQ(files.size(), 2u);
  for (const auto& [name, message] : files) {
    EXPECT_THAT(name, StartsWith("error-"));
    EXPECT_THAT(message, HasSubstr("$SLURM_NTASKS, $SLURM_LOCALID are not "
                                   "set (start each task with srun"));
  }
}

TEST_F(SlurmClusterTest, AProgramOfABatchScriptWithoutSrunIsToldToUseSrun) {
  // A batch script runs outside any step: Slurm sets SLURM_PROCID and
  // SLURM_NTASKS there too, but no step's variables, and rank 0 of 2 would
  // be a guess.
  const std::string out = FreshTestDir("batch");
  SubprocessOptions options = TestProcessOptions(
      "sbatch",
      {SlurmCluster::Command("sbatch"), "--wait", "--ntasks=2",
       absl::StrCat("--output=", out, "/job.out"),
       absl::StrCat("--wrap=", RunfilePath("tests/scheduler/place_program"),
                    " ", out)});
  options.env = cluster_->ClientEnvironment();
  options.env.insert(options.env.end(), kServerVariables.begin(),
                     kServerVariables.end());
  const ExitStatus exit = RunToEnd(std::move(options), kTimeout);
  EXPECT_FALSE(exit.success());  // The job failed.
  std::map<std::string, std::string> files = FilesIn(out);
  files.erase("job.out");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files.begin()->second,
              HasSubstr("$SLURM_STEP_NODELIST, $SLURM_STEP_TASKS_PER_NODE are "
                        "not set (start each task with srun"));
}

// Whether process `pid` is gone (or a zombie its parent has yet to reap).
bool Gone(int pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 &&
         line[paren + 2] == 'Z';
}

TEST_F(SlurmClusterTest, StoppingTheClusterEndsTheStepsStillRunning) {
  const std::string out = FreshTestDir("pids");
  // Each task writes its pid and its slurmstepd's, then waits.
  SubprocessOptions options = cluster_->SrunOptions(
      "srun", 2,
      {"/bin/sh", "-c",
       absl::StrCat("echo $$ $PPID > ", out, "/pids.$SLURM_PROCID.tmp && mv ",
                    out, "/pids.$SLURM_PROCID.tmp ", out,
                    "/pids.$SLURM_PROCID && exec sleep 3600")});
  absl::StatusOr<std::unique_ptr<Subprocess>> srun =
      Subprocess::Start(std::move(options));
  ASSERT_TRUE(srun.ok()) << srun.status();
  const absl::Time deadline = absl::Now() + kTimeout;
  while (FilesIn(out).size() < 2 && absl::Now() < deadline &&
         !(*srun)->TryWait().has_value()) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::vector<int> pids;
  for (const auto& [name, text] : FilesIn(out)) {
    for (absl::string_view word :
         absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
      int pid = 0;
      ASSERT_TRUE(absl::SimpleAtoi(word, &pid)) << text;
      pids.push_back(pid);
    }
  }
  ASSERT_EQ(pids.size(), 4u)
      << "the tasks did not start: " << (*srun)->LastLines(20);
  for (int pid : pids) EXPECT_FALSE(Gone(pid)) << pid;

  cluster_.reset();
  for (int pid : pids) EXPECT_TRUE(Gone(pid)) << pid << " still runs";
}

}  // namespace
}  // namespace ps::testing
