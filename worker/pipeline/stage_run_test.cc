#include "worker/pipeline/stage_run.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model_description.h"
#include "worker/worker_config.h"

namespace ps::worker::pipeline {
namespace {

WorkerConfig Pipelined(int stages, int workers, int micro_batches) {
  WorkerConfig config;
  config.servers = "127.0.0.1:1";
  config.pipeline_stages = stages;
  config.num_workers = workers;
  config.micro_batches = micro_batches;
  config.batch_size = 32;
  return config;
}

// The message of the check's error, or "" when it passes.
std::string Error(const WorkerConfig& config, int rank = 0) {
  absl::Status s = CheckPipelineConfig(config, rank);
  EXPECT_TRUE(s.ok() || absl::IsInvalidArgument(s)) << s;
  return std::string(s.message());
}

TEST(CheckPipelineConfigTest, AcceptsStagesTimesReplicas) {
  EXPECT_EQ(Error(Pipelined(2, 4, 8)), "");
  EXPECT_EQ(Error(Pipelined(1, 3, 1)), "");
  EXPECT_EQ(Error(Pipelined(4, 4, 32), 3), "");
}

TEST(CheckPipelineConfigTest, EachBadValueNamesItsFlag) {
  EXPECT_NE(Error(Pipelined(0, 4, 1)).find("--pipeline_stages=0"),
            std::string::npos);
  const std::string indivisible = Error(Pipelined(2, 3, 1));
  EXPECT_NE(indivisible.find("--num_workers=3"), std::string::npos);
  EXPECT_NE(indivisible.find("--pipeline_stages=2"), std::string::npos);
  EXPECT_NE(Error(Pipelined(2, 4, 5)).find("--micro_batches=5"),
            std::string::npos)
      << "5 does not divide 32";
  EXPECT_NE(Error(Pipelined(2, 4, 64)).find("--micro_batches=64"),
            std::string::npos);
  EXPECT_NE(Error(Pipelined(1, 2, 4)).find("--micro_batches"),
            std::string::npos);
  WorkerConfig local = Pipelined(2, 2, 1);
  local.local = true;
  EXPECT_NE(Error(local).find("--local"), std::string::npos);
}

TEST(CheckPipelineConfigTest, StageLinksAcrossHostsAreCheckedWithTheStages) {
  WorkerConfig config = Pipelined(2, 2, 1);
  config.stage_link_listen = "10.0.0.1:4000";
  config.stage_link_secret = "0123456789abcdef0123456789abcdef";
  EXPECT_EQ(Error(config, 0), "");
  EXPECT_NE(Error(config, 1).find("--stage_link_listen"), std::string::npos);
  config.tls_ca = "ca.pem";
  EXPECT_NE(Error(config, 0).find("TLS"), std::string::npos);
  WorkerConfig unsplit = Pipelined(1, 2, 1);
  unsplit.stage_link_previous = "10.0.0.1:4000";
  EXPECT_NE(Error(unsplit).find("need --pipeline_stages above 1"),
            std::string::npos);
}

TEST(CheckPipelineConfigTest, EachStagesGroupMayRunAnyServerMode) {
  for (const char* mode : {"sync", "ssp", "async"}) {
    WorkerConfig config = Pipelined(2, 2, 1);
    config.mode = mode;
    EXPECT_EQ(Error(config), "") << mode;
  }
}

TEST(StageRunTest, MoreStagesThanLayersIsRefusedNamingTheFlag) {
  auto backend = *kernels::CreateCpuBackend();
  const nn::ModelDescription d = *nn::ModelDescription::Parse("4-3");
  WorkerConfig config = Pipelined(2, 2, 1);
  absl::StatusOr<std::unique_ptr<StageRun>> run =
      StageRun::Create(config, 1, d, backend.get());
  ASSERT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("--pipeline_stages=2"),
            std::string::npos)
      << run.status();
}

TEST(StageRunTest, BuildsTheStageOfItsRank) {
  auto backend = *kernels::CreateCpuBackend();
  const nn::ModelDescription d = *nn::ModelDescription::Parse("8-6-4-3");
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<StageRun> run,
      StageRun::Create(Pipelined(2, 4, 2), 3, d, backend.get()));
  EXPECT_EQ(run->place().stage, 1);
  EXPECT_EQ(run->place().replica, 1);
  EXPECT_EQ(run->group_workers(), 2);
  // Only its stage's tensors, under the whole model's names, their initial
  // values uploaded by replica 0.
  const ModelSpec whole = d.Spec(1);
  const ModelSpec& mine = run->stage_spec();
  ASSERT_FALSE(mine.tensors.empty());
  ASSERT_LT(mine.tensors.size(), whole.tensors.size());
  const size_t first = whole.tensors.size() - mine.tensors.size();
  for (size_t i = 0; i < mine.tensors.size(); ++i) {
    EXPECT_EQ(mine.tensors[i].name, whole.tensors[first + i].name);
    EXPECT_EQ(mine.tensors[i].shape, whole.tensors[first + i].shape);
    EXPECT_EQ(mine.tensors[i].initializer.kind,
              InitializerSpec::Kind::kFromRank0);
  }
  ClientOptions options;
  options.servers = {"a:1", "a:2", "b:1", "b:2"};
  options.job_id = "run";
  options.rank = 3;
  PS_ASSERT_OK(run->UseStageGroup(&options));
  EXPECT_EQ(options.servers, (std::vector<std::string>{"b:1", "b:2"}));
  EXPECT_EQ(options.job_id, "run-stage1");
  EXPECT_EQ(options.rank, 1);
  options.servers = {"a:1", "a:2", "b:1"};
  EXPECT_EQ(run->UseStageGroup(&options).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StageRunTest, ReplicaZerosStagesEvaluate) {
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(EvaluatesTestSet(Pipelined(2, 4, 1), rank), rank < 2) << rank;
    EXPECT_EQ(EvaluatesTestSet(Pipelined(1, 4, 1), rank), rank == 0) << rank;
  }
}

TEST(CheckPipelineConfigTest, ScheduleAndSplitNamesAreChecked) {
  WorkerConfig config = Pipelined(2, 4, 8);
  config.pipeline_schedule = "1f1b";
  config.stage_split = "bytes";
  EXPECT_EQ(Error(config), "");
  config.pipeline_schedule = "pipedream";
  EXPECT_NE(Error(config).find("--pipeline_schedule=pipedream"),
            std::string::npos);
  config.pipeline_schedule = "gpipe";
  config.stage_split = "time";
  EXPECT_NE(Error(config).find("--stage_split=time"), std::string::npos);
}

}  // namespace
}  // namespace ps::worker::pipeline
