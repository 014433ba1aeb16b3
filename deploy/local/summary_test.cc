#include "deploy/local/summary.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Contains;

TEST(SummaryTest, ReportsOutcomeAccuracyAndEachProcess) {
  ClusterResult result;
  result.status = absl::AbortedError("worker 1 exited with code 3: boom");
  result.elapsed = absl::Milliseconds(83456.7);
  result.processes = {
      {"server 0", ExitStatus::Signaled(SIGTERM), true},
      {"worker 0", std::nullopt, false},
      {"worker 1", ExitStatus::Exited(3), false},
  };
  result.notes = {"something odd"};
  const std::vector<std::string> lines = SummaryLines(result);
  EXPECT_THAT(lines, Contains("result: FAILED: worker 1 exited with code 3: "
                              "boom"));
  EXPECT_THAT(lines, Contains("wall time: 1m23.456s"));
  EXPECT_THAT(lines, Contains("final test accuracy: not reported by worker 0"));
  EXPECT_THAT(lines, Contains("server 0: killed by signal 15 (SIGTERM) "
                              "(stopped by the launcher)"));
  EXPECT_THAT(lines, Contains("worker 0: never started"));
  EXPECT_THAT(lines, Contains("worker 1: exited with code 3"));
  EXPECT_THAT(lines, Contains("note: something odd"));

  result.stop_signal = SIGINT;
  result.status = absl::CancelledError("interrupted by signal 2 (SIGINT)");
  EXPECT_THAT(SummaryLines(result),
              Contains("result: stopped, interrupted by signal 2 (SIGINT)"));

  result.stop_signal = 0;
  result.status = absl::OkStatus();
  result.final_test_accuracy = 0.8912;
  EXPECT_THAT(SummaryLines(result), Contains("result: success"));
  EXPECT_THAT(SummaryLines(result), Contains("final test accuracy: 0.8912"));
}

}  // namespace
}  // namespace ps
