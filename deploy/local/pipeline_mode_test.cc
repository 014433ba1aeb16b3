#include "deploy/local/pipeline_mode.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "deploy/local/launch_config.h"
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
  LaunchConfig async = Pipelined(4, 2, 1);
  async.mode = "async";
  EXPECT_NE(Error(async).find("--mode=async"), std::string::npos);
  async.program = {"python3", "train.py"};
  EXPECT_TRUE(CheckPipelineConfig(async).ok())
      << "a program makes of the stages what it will";
}

TEST(PipelineModeTest, WorkersAndProgramsAreToldTheStages) {
  EXPECT_TRUE(PipelineWorkerFlags(LaunchConfig()).empty());
  EXPECT_TRUE(PipelineEnvironment(LaunchConfig()).empty());
  const LaunchConfig config = Pipelined(4, 2, 8);
  EXPECT_EQ(PipelineWorkerFlags(config),
            (std::vector<std::string>{
                "--pipeline_stages=2", "--micro_batches=8",
                "--pipeline_schedule=gpipe", "--stage_split=compute"}));
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

TEST(PipelineModeTest, ScheduleAndSplitAreCheckedAndPassedOn) {
  LaunchConfig config = Pipelined(4, 2, 4);
  config.pipeline_schedule = "1f1b";
  config.stage_split = "bytes";
  EXPECT_TRUE(CheckPipelineConfig(config).ok());
  const std::vector<std::string> flags = PipelineWorkerFlags(config);
  EXPECT_NE(std::find(flags.begin(), flags.end(), "--pipeline_schedule=1f1b"),
            flags.end());
  EXPECT_NE(std::find(flags.begin(), flags.end(), "--stage_split=bytes"),
            flags.end());
  config.pipeline_schedule = "zero-bubble";
  EXPECT_NE(Error(config).find("--pipeline_schedule=zero-bubble"),
            std::string::npos);
  config.pipeline_schedule = "gpipe";
  config.stage_split = "layers";
  EXPECT_NE(Error(config).find("--stage_split=layers"), std::string::npos);
}

}  // namespace
}  // namespace ps
