#include "deploy/local/pipeline_mode.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "deploy/local/launch_config.h"
#include "deploy/local/run_directory.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

LaunchConfig Pipelined(int workers, int stages, int micro_batches) {
  LaunchConfig config;
  config.num_workers = workers;
  config.pipeline_stages = stages;
  config.micro_batches = micro_batches;
  config.batch_size = 32;
  return config;
}

std::string Error(const LaunchConfig& config) {
  return std::string(CheckPipelineConfig(config).message());
}

TEST(PipelineModeTest, AcceptsReplicasTimesStages) {
  EXPECT_TRUE(CheckPipelineConfig(Pipelined(4, 2, 8)).ok());
  EXPECT_TRUE(CheckPipelineConfig(Pipelined(2, 1, 1)).ok());
  EXPECT_TRUE(CheckPipelineConfig(LaunchConfig()).ok()) << "the defaults";
}

TEST(PipelineModeTest, RefusesEachBadValueNamingItsFlags) {
  const std::string indivisible = Error(Pipelined(3, 2, 1));
  EXPECT_NE(indivisible.find("--num_workers=3"), std::string::npos);
  EXPECT_NE(indivisible.find("--pipeline_stages=2"), std::string::npos);
  EXPECT_NE(Error(Pipelined(4, 0, 1)).find("--pipeline_stages=0"),
            std::string::npos);
  EXPECT_NE(Error(Pipelined(4, 2, 3)).find("--micro_batches=3"),
            std::string::npos)
      << "3 does not divide 32";
  EXPECT_NE(Error(Pipelined(4, 2, 0)).find("--micro_batches=0"),
            std::string::npos);
  EXPECT_NE(Error(Pipelined(4, 1, 2)).find("--micro_batches"),
            std::string::npos);
  LaunchConfig deep = Pipelined(8, 4, 1);
  deep.model = "784-10";
  EXPECT_NE(Error(deep).find("--pipeline_stages=4"), std::string::npos)
      << "one layer, four stages";
  LaunchConfig ring = Pipelined(4, 2, 1);
  ring.mode = "allreduce";
  EXPECT_NE(Error(ring).find("--mode=allreduce"), std::string::npos);
  ring.program = {"python3", "train.py"};
  EXPECT_TRUE(CheckPipelineConfig(ring).ok())
      << "a program makes of the stages what it will";
}

TEST(PipelineModeTest, EachStagesGroupMayRunAnyServerMode) {
  for (const char* mode : {"sync", "ssp", "async"}) {
    LaunchConfig config = Pipelined(4, 2, 1);
    config.mode = mode;
    EXPECT_TRUE(CheckPipelineConfig(config).ok()) << mode;
  }
}

bool Has(const std::vector<std::string>& argv, const std::string& flag) {
  return std::find(argv.begin(), argv.end(), flag) != argv.end();
}

TEST(PipelineModeTest, EachStageHasAServerGroupOfItsOwn) {
  LaunchConfig config = Pipelined(6, 2, 1);  // 3 replicas.
  config.num_servers = 2;
  config.job_id = "run7";
  config.checkpoint_dir = "/ckpt";
  config.run_dir = "/runs/r";
  config.server_binary = "server";
  EXPECT_EQ(ServerGroups(config), 2);
  EXPECT_EQ(TotalServers(config), 4);
  EXPECT_EQ(MakeClusterSpec(config).num_servers, 4);
  for (int index = 0; index < 4; ++index) {
    SCOPED_TRACE(index);
    const ServerGroup group = ServerGroupOf(config, index);
    EXPECT_EQ(group.stage, index / 2);
    EXPECT_EQ(group.shard, index % 2);
    const std::vector<std::string> argv = ServerArgv(config, index, "p");
    const std::string stage = std::to_string(index / 2);
    EXPECT_TRUE(Has(argv, "--server_index=" + std::to_string(index % 2)));
    EXPECT_TRUE(Has(argv, "--num_servers=2"));
    EXPECT_TRUE(Has(argv, "--num_workers=3")) << "the stage's replicas";
    EXPECT_TRUE(Has(argv, "--job_id=run7-stage" + stage));
    EXPECT_TRUE(Has(argv, "--checkpoint_dir=/ckpt/stage" + stage));
    EXPECT_TRUE(
        Has(argv, "--report_file=" + ServerReportFile("/runs/r", index)))
        << "each process a report of its own";
  }
  // Replica 0's stages take part in saving; the others not.
  config.save_model = "/m.bin";
  for (int rank = 0; rank < 6; ++rank) {
    EXPECT_EQ(Has(WorkerArgv(config, rank, {"h:1"}), "--save_model=/m.bin"),
              rank < 2)
        << rank;
  }
  // Worker metrics follow every group's servers.
  config.metrics_port_base = 9000;
  EXPECT_EQ(WorkerMetricsPort(config, 0), 9004);
}

TEST(PipelineModeTest, AProgramsStagesShareOneGroup) {
  LaunchConfig config = Pipelined(4, 2, 1);
  config.program = {"python3", "train.py"};
  config.job_id = "run7";
  EXPECT_EQ(ServerGroups(config), 1);
  EXPECT_EQ(TotalServers(config), config.num_servers);
  const ServerGroup group = ServerGroupOf(config, 1);
  EXPECT_EQ(group.shard, 1);
  EXPECT_EQ(group.workers, 4);
  EXPECT_EQ(group.job_id, "run7");
  EXPECT_FALSE(SavesModel(config, 1));
}

TEST(PipelineModeTest, WorkersAndProgramsAreToldTheStages) {
  EXPECT_TRUE(PipelineWorkerFlags(LaunchConfig()).empty());
  EXPECT_TRUE(PipelineEnvironment(LaunchConfig()).empty());
  const LaunchConfig config = Pipelined(4, 2, 8);
  EXPECT_EQ(
      PipelineWorkerFlags(config),
      (std::vector<std::string>{"--pipeline_stages=2", "--micro_batches=8"}));
  const std::vector<std::pair<std::string, std::string>> env =
      PipelineEnvironment(config);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0],
            (std::pair<std::string, std::string>{"PS_PIPELINE_STAGES", "2"}));
  EXPECT_EQ(env[1].second, "8");
}

TEST(PipelineModeTest, TheWorkersArgvAndEnvironmentCarryThem) {
  const LaunchConfig config = Pipelined(4, 2, 4);
  const std::vector<std::string> argv = WorkerArgv(config, 3, {"h:1"});
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--pipeline_stages=2"),
            argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--micro_batches=4"),
            argv.end());
  const auto env = WorkerEnv(config, 3, {"h:1"});
  EXPECT_NE(
      std::find(env.begin(), env.end(),
                std::pair<std::string, std::string>{"PS_PIPELINE_STAGES", "2"}),
      env.end());
  EXPECT_EQ(ValidateLaunchConfig(Pipelined(3, 2, 1)).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ps
