// The launcher running a program of the user's as its workers, as torchrun
// does: the real launcher and server binaries on 127.0.0.1.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"

namespace ps {
namespace {

using ::ps::testing::LauncherRun;
using ::ps::testing::LineWith;
using ::ps::testing::RunfilePath;
using ::testing::Contains;
using ::testing::HasSubstr;

// A generous limit: the job itself takes well under a second.
constexpr absl::Duration kLaunchTimeout = absl::Seconds(120);

LauncherRun RunLauncher(std::vector<std::string> args) {
  return ::ps::testing::RunLauncher(std::move(args), kLaunchTimeout);
}

TEST(LaunchProgramTest, EachRankSeesItsEnvironmentAndTheServersStop) {
  const LauncherRun launch = RunLauncher(
      {"--num_servers=2", "--num_workers=2", "--", "/bin/sh", "-c",
       "echo \"rank $PS_RANK/$PS_NUM_WORKERS torchrun $RANK/$WORLD_SIZE "
       "servers $PS_NUM_SERVERS $PS_SERVERS job $PS_JOB_ID\""});
  EXPECT_TRUE(launch.exit.success()) << launch.exit.ToString();
  for (int rank : {0, 1}) {
    const std::string line = LineWith(
        launch.lines, absl::StrCat("[worker ", rank, "] rank ", rank, "/2"));
    ASSERT_FALSE(line.empty()) << "rank " << rank << " printed nothing";
    EXPECT_THAT(line, HasSubstr(absl::StrCat("torchrun ", rank, "/2")));
    EXPECT_THAT(line, HasSubstr("servers 2 127.0.0.1:"));
    // A job id of the launcher's making, which its servers check.
    EXPECT_THAT(line, HasSubstr(" job launch-"));
  }
  // The servers, which no worker told it was done, were stopped.
  EXPECT_THAT(launch.lines,
              Contains("[launch] all workers finished; stopping the servers"));
  EXPECT_THAT(launch.lines,
              Contains("[launch] server 0: exited with code 0 (stopped by the "
                       "launcher)"));
  EXPECT_THAT(launch.lines, Contains("[launch] result: success"));
}

// After --max_restarts restarts (3 by default), each failing the same way.
TEST(LaunchProgramTest, AFailingProgramFailsTheJobNamingIt) {
  const LauncherRun launch =
      RunLauncher({"--num_workers=1", "--", "/bin/sh", "-c",
                   "echo 'cannot open data'; exit 3"});
  EXPECT_EQ(launch.exit.exit_code(), 1) << launch.exit.ToString();
  EXPECT_THAT(LineWith(launch.lines, "result: FAILED"),
              HasSubstr("worker 0 exited with code 3: cannot open data (not "
                        "restarted: --max_restarts=3 used up)"));
  EXPECT_THAT(launch.lines,
              Contains("[launch] restarts: 3 of --max_restarts=3"));
}

TEST(LaunchProgramTest, RefusesFlagsOfOurWorkerAndAMissingProgram) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const Case& c : {
           Case{{"--epochs=3", "--", "/bin/true"},
                "--epochs configures our worker binary"},
           Case{{"--"}, "no program after --"},
           Case{{"/bin/true"}, "a worker program goes after --"},
       }) {
    const LauncherRun launch = RunLauncher(c.args);
    EXPECT_EQ(launch.exit.exit_code(), 2) << c.error;
    EXPECT_THAT(LineWith(launch.lines, c.error), HasSubstr(c.error));
  }
}

TEST(LaunchProgramTest, HelpExitsZeroAndBadFlagsExitTwo) {
  for (const char* help : {"--help", "--helpfull"}) {
    const LauncherRun launch = RunLauncher({help});
    EXPECT_EQ(launch.exit.exit_code(), 0) << help;
    EXPECT_THAT(LineWith(launch.lines, "--max_restarts"),
                HasSubstr("Restarts, in all"))
        << help;
  }
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const Case& c : {
           Case{{"--no_such_flag=1"}, "unknown flag --no_such_flag"},
           Case{{"--num_workers=two"}, "--num_workers=two"},
           Case{{"--mode=ssp", "--", "/bin/true"}, "--mode=ssp needs"},
           Case{{"--output=fancy", "--", "/bin/true"}, "--output must be"},
       }) {
    const LauncherRun launch = RunLauncher(c.args);
    EXPECT_EQ(launch.exit.exit_code(), 2) << c.error;
    EXPECT_THAT(LineWith(launch.lines, c.error), HasSubstr(c.error));
  }
}

// The servers hold what a program declares, in every mode.
class DeclaredModelTest
    : public ::testing::TestWithParam<std::vector<std::string>> {};

std::vector<std::string> DeclaredModelJob(std::vector<std::string> flags,
                                          std::vector<std::string> program) {
  std::vector<std::string> args = {
      "--num_servers=3",        "--num_workers=2",
      "--optimizer=sgd",        "--learning_rate=0.2",
      "--lr_schedule=constant", "--server_flags=--momentum=0"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.push_back(RunfilePath("tests/declared_model_program"));
  args.insert(args.end(), program.begin(), program.end());
  return args;
}

TEST_P(DeclaredModelTest, TrainsWhatTheProgramDeclares) {
  const LauncherRun launch = RunLauncher(DeclaredModelJob(GetParam(), {}));
  EXPECT_TRUE(launch.exit.success()) << launch.exit.ToString();
  const std::string check = LineWith(launch.lines, "distance to the minimum");
  EXPECT_THAT(check, HasSubstr("[worker 0] declared_model_program: mode "));
  std::printf("%s\n", check.c_str());
  for (int rank : {0, 1}) {
    EXPECT_THAT(launch.lines,
                Contains(absl::StrCat("[worker ", rank,
                                      "] declared_model_program: ok")));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, DeclaredModelTest,
    ::testing::Values(std::vector<std::string>{"--mode=sync"},
                      std::vector<std::string>{"--mode=ssp", "--staleness=2"},
                      std::vector<std::string>{"--mode=async"}));

TEST(LaunchProgramTest, ADeclarationThatDiffersFromRank0sIsRefused) {
  // The refusal is final: no restart would change it.
  const LauncherRun launch = RunLauncher(
      DeclaredModelJob({"--mode=sync", "--max_restarts=0"},
                       {"--mismatch_rank=1", "--big_elements=1000"}));
  EXPECT_EQ(launch.exit.exit_code(), 1) << launch.exit.ToString();
  EXPECT_THAT(LineWith(launch.lines, "[worker 1] declared_model_program:"),
              HasSubstr("tensor 1 \"block/conv.w\" shape: [3,7,5] declared "
                        "by rank 1, [3,5,7] by rank 0"));
}

TEST(LaunchProgramTest, ADeclarationOverTheServersLimitIsRefused) {
  const LauncherRun launch = RunLauncher(DeclaredModelJob(
      {"--mode=sync", "--max_restarts=0",
       "--server_flags=--momentum=0 --max_model_bytes=1000000"},
      {}));
  EXPECT_EQ(launch.exit.exit_code(), 1) << launch.exit.ToString();
  // Every rank is refused: whichever exits first stops the job, and the
  // launcher may stop the other before it prints.
  EXPECT_THAT(LineWith(launch.lines, "result: FAILED"),
              HasSubstr("tensor 2 \"embedding.table/big\": shape [10000000] "
                        "is larger than the servers' limit of 1000000 bytes"));
}

// The example a user copies recovers the answer it knows, in every mode.
class ExampleTest : public ::testing::TestWithParam<std::vector<std::string>> {
};

TEST_P(ExampleTest, LinearRegressionRecoversTheKnownAnswer) {
  std::vector<std::string> args = GetParam();
  args.insert(args.begin(), {"--num_servers=2", "--num_workers=2"});
  args.push_back("--");
  args.push_back(RunfilePath("examples/linear_regression"));
  const LauncherRun launch = RunLauncher(args);
  EXPECT_TRUE(launch.exit.success()) << launch.exit.ToString();
  for (int rank : {0, 1}) {
    const std::string line =
        LineWith(launch.lines, absl::StrCat("[worker ", rank, "] rank "));
    EXPECT_THAT(line, HasSubstr(": recovered")) << line;
    std::printf("%s\n", line.c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ExampleTest,
    ::testing::Values(std::vector<std::string>{"--mode=sync"},
                      std::vector<std::string>{"--mode=ssp", "--staleness=2"},
                      std::vector<std::string>{"--mode=async"}));

}  // namespace
}  // namespace ps
