// A whole sync job (2 servers, 2 workers: the real launcher and server
// binaries, the workers a program on the client library) in which worker 1
// pushes a NaN gradient at step 5. The push must be refused, and the job
// either stops with an error naming the worker (--on_worker_failure=fail,
// no restarts) or goes on (--on_worker_failure=elastic, the worker started
// again); either way every weight the servers hold stays finite.

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "update/checkpoint.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kLaunchTimeout = absl::Seconds(240);
constexpr int kServers = 2;

// The job; `flags` are the launcher's failure handling.
std::vector<std::string> Job(const std::string& run_dir,
                             std::vector<std::string> flags) {
  std::vector<std::string> args = {
      "--num_servers=2",     "--num_workers=2",
      "--mode=sync",         "--optimizer=sgd",
      "--learning_rate=0.1", "--lr_schedule=constant",
      "--output=stream",     absl::StrCat("--run_dir=", run_dir)};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(), {"--", RunfilePath("tests/nan_push_program"),
                           "--steps=20", "--nan_rank=1", "--nan_step=5"});
  return args;
}

// Every weight of every shard's newest checkpoint (the servers write one
// when they stop) is finite; prints how many there are.
void ExpectCheckpointsFinite(const std::string& run_dir) {
  for (int shard = 0; shard < kServers; ++shard) {
    absl::StatusOr<std::vector<std::string>> files =
        update::ListCheckpoints(run_dir + "/checkpoints", shard);
    ASSERT_TRUE(files.ok()) << files.status();
    ASSERT_FALSE(files->empty()) << "no checkpoint of server " << shard;
    absl::StatusOr<update::ShardCheckpoint> checkpoint =
        update::ReadCheckpoint(files->front());
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    size_t total = 0, finite = 0;
    for (const update::SliceSnapshot& slice : checkpoint->slices) {
      for (float w : slice.weights) finite += std::isfinite(w) ? 1 : 0;
      total += slice.weights.size();
    }
    std::printf(
        "server %d's last checkpoint (version %llu): %zu of %zu "
        "weights finite\n",
        shard, static_cast<unsigned long long>(checkpoint->version), finite,
        total);
    EXPECT_GT(total, 0u);
    EXPECT_EQ(finite, total) << "server " << shard;
  }
}

// The lines a reader of the job's output looks for.
void PrintWhatTheJobSaid(const LauncherRun& launch) {
  for (const std::string& line : launch.lines) {
    if (absl::StrContains(line, "is nan") ||
        absl::StrContains(line, "result:") || absl::StrContains(line, "dead") ||
        absl::StrContains(line, "restart") ||
        absl::StrContains(line, "nan_push_program:")) {
      std::printf("  %s\n", line.c_str());
    }
  }
  std::fflush(stdout);
}

TEST(NanPushTest, TheJobStopsNamingTheWorkerWhenFailuresAreFatal) {
  const std::string run_dir = TempPath("nan-fail");
  const LauncherRun launch = RunLauncher(
      Job(run_dir, {"--server_flags=--momentum=0 --on_worker_failure=fail",
                    "--max_restarts=0"}),
      kLaunchTimeout);
  PrintWhatTheJobSaid(launch);
  EXPECT_EQ(launch.exit.exit_code(), 1) << launch.exit.ToString();
  const std::string result = LineWith(launch.lines, "result: FAILED");
  EXPECT_THAT(result, HasSubstr("worker 1 exited with code 1"));
  EXPECT_THAT(result, HasSubstr("the push of step 5 was refused"));
  EXPECT_THAT(result, HasSubstr("element 3 is nan"));
  // The server that holds b[3] said so too.
  EXPECT_THAT(LineWith(launch.lines, "push refused", "element 3 is nan"),
              HasSubstr("gradient of b (tensor 1) element 3 is nan"));
  ExpectCheckpointsFinite(run_dir);
}

TEST(NanPushTest, AnElasticJobGoesOnAndEndsWithFiniteWeights) {
  const std::string run_dir = TempPath("nan-elastic");
  // Started again after the servers' lease on it ran out (most likely:
  // nothing here depends on it), so that they go on without it meanwhile.
  const LauncherRun launch = RunLauncher(
      Job(run_dir, {"--server_flags=--momentum=0 --on_worker_failure=elastic "
                    "--worker_timeout=2s --rejoin_grace=10s",
                    "--max_restarts=1", "--restart_backoff=5s"}),
      kLaunchTimeout);
  PrintWhatTheJobSaid(launch);
  EXPECT_TRUE(launch.exit.success()) << launch.exit.ToString();
  EXPECT_THAT(LineWith(launch.lines, "[worker 1]", "is nan"),
              HasSubstr("the push of step 5 was refused"));
  EXPECT_THAT(LineWith(launch.lines, "nan_push_program:"),
              HasSubstr("weights finite"));
  EXPECT_THAT(LineWith(launch.lines, "result:"), HasSubstr("success"));
  ExpectCheckpointsFinite(run_dir);
}

}  // namespace
}  // namespace ps::testing
