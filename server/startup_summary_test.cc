#include "server/startup_summary.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "update/lr_schedule.h"

namespace ps::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ServerConfig Config() {
  ServerConfig c;
  c.address = "10.0.0.5:7000";
  c.server_index = 1;
  c.num_servers = 3;
  c.coordinator.num_workers = 4;
  c.coordinator.lr_schedule = *update::LearningRateSchedule::Create(
      update::LrScheduleKind::kCosine, 0.25f, 0);
  c.optimizer.learning_rate = 0.25f;
  c.job_id = "run-7";
  c.limits.max_tensors = 1000;
  c.limits.max_model_bytes = uint64_t{3} << 20;
  return c;
}

TEST(StartupSummaryTest, SaysWhereAndHowTheShardServes) {
  ServerConfig c = Config();
  c.coordinator.mode = ConsistencyMode::kSsp;
  c.coordinator.staleness = 2;
  c.cpus = {0, 1, 2, 3, 8};
  const std::vector<std::string> lines =
      StartupSummary(c, {7000, 0, false, std::nullopt});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            "listening on 10.0.0.5:7000 (port 7000), shard 1 of 3, mode ssp "
            "staleness 2, 4 workers, optimizer adam (unless declared), CPUs "
            "0-3,8, job \"run-7\"; waiting for rank 0 to declare the model "
            "(at most 1000 tensors, 3 MiB)");
  EXPECT_EQ(lines[1], "connections: plaintext; health checks on the same port");
  EXPECT_EQ(lines[2],
            "workers are dead after 10s without a request "
            "(--on_worker_failure=elastic); learning rate cosine 0.25; "
            "checkpoints off");
}

TEST(StartupSummaryTest, NamesARestoredModelTheSocketAndTheCheckpoints) {
  ServerConfig c = Config();
  CheckpointPolicy policy;
  policy.dir = "/ckpt";
  policy.every_updates = 50;
  policy.every = absl::Seconds(30);
  c.checkpoints = policy;
  const std::vector<std::string> lines =
      StartupSummary(c, {7000, 7001, true, 12});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], HasSubstr("mode sync, 4 workers"));
  EXPECT_THAT(lines[0], HasSubstr("CPUs any"));
  EXPECT_THAT(lines[0], HasSubstr("; holds 12 slices of the restored model"));
  EXPECT_THAT(lines[0], Not(HasSubstr("staleness")));
  EXPECT_EQ(lines[1],
            "connections: plaintext, and workers on this host over a Unix "
            "socket; health checks also on port 7001 (plaintext, health "
            "only)");
  EXPECT_THAT(lines[2],
              HasSubstr("checkpoints in /ckpt every 50 updates / 30s"));
}

}  // namespace
}  // namespace ps::server
