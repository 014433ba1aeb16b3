// What a SIGKILL of one worker does in the all-reduce mode: the ring breaks,
// every worker exits (the survivors with code 3, their peer lost), and the
// restarted ring resumes from rank 0's last checkpoint, training the same
// bits as a run that was never killed. The real coordinator and worker
// binaries on 127.0.0.1, driven one process at a time.
//
// No timing: the first ring plans more steps than it could train in days
// and is killed once a checkpoint exists; the restarted ring trains to 100
// steps past the newest checkpoint, and so does the run it is compared
// with.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/exit_codes.h"
#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/process_cluster.h"
#include "update/checkpoint.h"

namespace ps {
namespace {

using ::ps::testing::LineWith;
using ::ps::testing::ProcessCluster;
using ::ps::testing::ReadTestFile;
using ::ps::testing::RunCluster;
using ::ps::testing::SmallJob;
using ::ps::testing::TempPath;

constexpr absl::Duration kTimeout = absl::Seconds(240);
constexpr int kCheckpointEvery = 50;

LaunchConfig RingJob(const std::string& checkpoint_dir) {
  LaunchConfig config = SmallJob();
  config.mode = "allreduce";
  config.num_servers = 1;  // The coordinator.
  config.batch_size = 64;
  config.epochs = 1000;
  config.optimizer = "adam";
  config.learning_rate = 0.001;
  config.checkpoint_dir = checkpoint_dir;
  config.extra_worker_flags = {
      "--log_every=10",
      absl::StrCat("--checkpoint_every_steps=", kCheckpointEvery)};
  return config;
}

// The newest checkpoint's version in `dir`, once there is one.
std::optional<uint64_t> NewestVersion(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> paths =
      update::ListCheckpoints(dir, 0);
  if (!paths.ok() || paths->empty()) return std::nullopt;
  return update::CheckpointVersion(
      std::filesystem::path(paths->front()).filename().string(), 0);
}

TEST(AllreduceFaultTest, KilledWorkerRestartsTheRingFromTheLastCheckpoint) {
  const std::string dir = TempPath("ring-checkpoints");
  ProcessCluster cluster(RingJob(dir));
  ASSERT_TRUE(cluster.StartServer(0).ok());
  ASSERT_TRUE(cluster.StartAllWorkers().ok());
  const absl::Time deadline = absl::Now() + kTimeout;
  while (!NewestVersion(dir).has_value() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(NewestVersion(dir).has_value()) << "no checkpoint in time";

  cluster.KillWorker(1);
  // Its peer's collective fails: the ring is broken, and the survivor says
  // so with the code of a lost peer.
  std::optional<ExitStatus> survivor = cluster.WaitWorker(0, kTimeout);
  ASSERT_TRUE(survivor.has_value());
  EXPECT_EQ(survivor->exit_code(), kExitServersLost) << survivor->ToString();
  EXPECT_NE(LineWith(cluster.WorkerLines(0), "all-reduce (rank 0 of 2)"), "");
  // Where it stood: the steps after the checkpoint are trained again.
  const uint64_t resume = *NewestVersion(dir);
  ASSERT_EQ(resume % kCheckpointEvery, 0u);

  const uint64_t end = resume + 100;
  const std::string resumed_model = TempPath("resumed.model");
  const std::vector<std::string> to_end = {absl::StrCat("--max_steps=", end)};
  ASSERT_TRUE(cluster.StartWorker(1, to_end).ok());
  std::vector<std::string> rank0_flags = to_end;
  rank0_flags.push_back(absl::StrCat("--save_model=", resumed_model));
  ASSERT_TRUE(cluster.StartWorker(0, rank0_flags).ok());
  for (int rank : {0, 1}) {
    std::optional<ExitStatus> status = cluster.WaitWorker(rank, kTimeout);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(status->success())
        << "worker " << rank << " " << status->ToString();
    EXPECT_NE(LineWith(cluster.WorkerLines(rank),
                       "joined the all-reduce ring "
                       "(round 1)"),
              "");
    EXPECT_NE(LineWith(cluster.WorkerLines(rank), "resuming at",
                       absl::StrCat("(clock ", resume, ")")),
              "");
  }

  // The same job never killed, for as many steps.
  LaunchConfig clean = RingJob(TempPath("clean-checkpoints"));
  clean.save_model = TempPath("clean.model");
  clean.extra_worker_flags.push_back(absl::StrCat("--max_steps=", end));
  const ClusterResult result = RunCluster(clean);
  ASSERT_TRUE(result.status.ok()) << result.status;
  const std::string a = ReadTestFile(resumed_model);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == ReadTestFile(clean.save_model))
      << "the resumed ring trained other bits than a run never killed";
}

}  // namespace
}  // namespace ps
