// A worker killed after its done line ("trained N steps", which it prints
// once the servers acknowledged its Done) has done its part: the launcher
// counts it as finished instead of failing the run or restarting it into
// servers that may have exited. Killed before the line, it is restarted.

#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/progress_line.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/local_cluster_testing.h"
#include "deploy/local/summary.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// The worker log's pattern (common/logging.h) around `message`.
std::string InfoLine(int rank, const std::string& message) {
  return absl::StrCat("12:00:00.000 [worker ", rank, "] info: ", message);
}

std::string DoneLine(int rank) {
  return InfoLine(rank, FormatProgressLine(TrainedSummary{10, 640, 1.5, 0.5}));
}

// A stand-in worker that says Done, prints its done line (or not) and
// then kills itself as SIGKILL would, once.
std::string KilledWorker(const std::string& done_dir, bool after_done_line) {
  return absl::StrCat(
      "if [ -e ", done_dir, "/killed.$2 ]; then touch ", done_dir,
      "/done.$2; exit 0; fi; touch ", done_dir, "/killed.$2; ",
      after_done_line ? absl::StrCat("touch ", done_dir, "/done.$2; echo '",
                                     DoneLine(1), "'; ")
                      : "",
      "kill -KILL $$");
}

TEST(LocalClusterDoneTest, AWorkerKilledAfterItsDoneLineHasFinished) {
  Output output;
  const std::string done = DoneDir("killed_after_done");
  // The server exits as soon as both said Done, as a real one does; a
  // restarted worker 1 would find none.
  ClusterSpec spec = ShellCluster(
      1, {ServerUntilDone(done, 2)}, 2,
      {WorkerThenDone(done, absl::StrCat("echo '", DoneLine(0), "'")),
       KilledWorker(done, /*after_done_line=*/true)});
  spec.max_restarts = 3;
  spec.restart_backoff = absl::Milliseconds(10);
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.ExitCode(), kExitOk);
  EXPECT_TRUE(result.restarts.empty());
  const ProcessOutcome& killed = Find(result, "worker 1");
  ASSERT_TRUE(killed.exit.has_value());
  EXPECT_FALSE(killed.exit->success());
  EXPECT_TRUE(killed.finished_before_exit);
  EXPECT_FALSE(Find(result, "worker 0").finished_before_exit);
  EXPECT_THAT(output.lines(),
              Contains(HasSubstr("worker 1 killed by signal 9 (SIGKILL) after "
                                 "its done line")));
  EXPECT_THAT(SummaryLines(result),
              Contains(HasSubstr("worker 1: killed by signal 9 (SIGKILL) "
                                 "(after its done line: finished)")));
}

TEST(LocalClusterDoneTest, AWorkerKilledBeforeItsDoneLineIsRestarted) {
  Output output;
  const std::string done = DoneDir("killed_before_done");
  ClusterSpec spec =
      ShellCluster(1, {ServerUntilDone(done, 2)}, 2,
                   {WorkerThenDone(done, "true"),
                    KilledWorker(done, /*after_done_line=*/false)});
  spec.max_restarts = 3;
  spec.restart_backoff = absl::Milliseconds(10);
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.restarts.size(), 1u);
  EXPECT_EQ(result.restarts[0].name, "worker 1");
  EXPECT_FALSE(Find(result, "worker 1").finished_before_exit);
}

// Without restarts too: the done line, not a restart, is what spares the
// run.
TEST(LocalClusterDoneTest, ADoneLineCountsWithoutRestarts) {
  Output output;
  const std::string done = DoneDir("done_no_restarts");
  LocalCluster cluster(
      ShellCluster(1, {ServerUntilDone(done, 2)}, 2,
                   {WorkerThenDone(done, "true"),
                    KilledWorker(done, /*after_done_line=*/true)}),
      output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_TRUE(Find(result, "worker 1").finished_before_exit);
}

// Only the info line in the log's pattern counts: the same words in a
// warning, or printed by some program, are no done line.
TEST(LocalClusterDoneTest, TheDoneWordsOutsideTheInfoLineDoNotCount) {
  Output output;
  const std::string done = DoneDir("not_a_done_line");
  const std::string message =
      FormatProgressLine(TrainedSummary{10, 640, 1.5, 0.5});
  LocalCluster cluster(
      ShellCluster(
          1, {ServerUntilDone(done, 2)}, 2,
          {WorkerThenDone(done, "true"),
           absl::StrCat("echo '12:00:00.000 [worker 1] warning: ", message,
                        "'; echo '", message, "'; kill -KILL $$")}),
      output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.ExitCode(), kExitFailed);
  EXPECT_THAT(result.status.message(),
              HasSubstr("worker 1 killed by signal 9 (SIGKILL)"));
}

}  // namespace
}  // namespace ps
