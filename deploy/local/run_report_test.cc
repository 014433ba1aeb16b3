#include "deploy/local/run_report.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/exit_codes.h"
#include "common/temp_dir_testing.h"
#include "deploy/local/launch_config.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/run_directory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// The lines FinishRun prints that start with "next: ".
std::vector<std::string> NextLines(const ClusterResult& result,
                                   const std::string& name,
                                   const std::string& mode = "sync") {
  const std::string dir = ::ps::testing::UnusedTestPath(name);
  absl::StatusOr<std::unique_ptr<RunDirectory>> run = RunDirectory::Create(dir);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {};
  LaunchConfig config;
  config.checkpoint_dir = dir + "/checkpoints";
  config.mode = mode;
  RunRecord record;
  std::vector<std::string> next;
  for (const std::string& line :
       FinishRun(result, config, {}, false, dir, **run, &record)) {
    if (line.rfind("next: ", 0) == 0) next.push_back(line);
  }
  return next;
}

TEST(RunReportTest, AFinishedRunCanBeExtended) {
  ClusterResult result;
  EXPECT_THAT(NextLines(result, "finished"),
              Contains(HasSubstr("to train on: --extend=")));
}

TEST(RunReportTest, AFailedRunCanBeResumed) {
  ClusterResult result;
  result.status = absl::AbortedError("worker 1 exited with code 3");
  EXPECT_THAT(NextLines(result, "failed"), Contains(HasSubstr("--resume=")));
}

TEST(RunReportTest, AFailedRunSaysWhoseCheckpointsItGoesOnFrom) {
  ClusterResult result;
  result.status = absl::AbortedError("worker 1 exited with code 3");
  EXPECT_THAT(NextLines(result, "servers"),
              Contains(HasSubstr("the servers' last checkpoints")));
  EXPECT_THAT(NextLines(result, "ring", "allreduce"),
              Contains(HasSubstr("the ring's last checkpoints")));
}

TEST(RunReportTest, BadConfigurationIsNotToBeResumed) {
  ClusterResult result;
  result.status = absl::AbortedError(
      "worker 1 exited with code 2: no CUDA device (exit code 2: bad "
      "configuration, not restarted)");
  result.bad_configuration = true;
  const std::vector<std::string> next = NextLines(result, "bad_config");
  EXPECT_THAT(next, Not(Contains(HasSubstr("--resume="))));
  EXPECT_THAT(next, IsEmpty());
  EXPECT_EQ(result.ExitCode(), kExitBadConfig);
}

}  // namespace
}  // namespace ps
