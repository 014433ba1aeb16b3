// --worker_memory_budget through the real binaries: a model whose unsplit
// worker needs more tensor memory than the budget is refused (by the
// launcher's check before anything starts, and by the worker itself, exit
// code 2), naming the budget, the bytes and the stages that fit; split into
// 2 stages, its workers fit and train.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "deploy/local/launch_config.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_split.h"
#include "worker/pipeline/memory_budget.h"

namespace ps {
namespace {

using worker::pipeline::FormatBytes;
using worker::pipeline::MeasureStage;
using worker::pipeline::MostWorkerBytes;

// Wide enough that its parameters dominate, small enough to evaluate the
// test set in seconds.
constexpr char kWide[] = "784-1024-1024-10";
constexpr int kBatch = 256;

LaunchConfig WideJob(int stages, int64_t budget) {
  LaunchConfig job = ::ps::testing::SmallJob();
  job.model = kWide;
  job.num_servers = 1;
  job.num_workers = stages;  // One replica.
  job.pipeline_stages = stages;
  job.batch_size = kBatch;
  job.max_steps = 3;
  job.worker_memory_budget = absl::StrCat(budget);
  job.stage_split = "bytes";  // What the figures below are of.
  return job;
}

worker::pipeline::MemoryFlags Flags(int stages) {
  worker::pipeline::MemoryFlags flags;
  flags.stages = stages;
  flags.batch_size = kBatch;
  return flags;
}

TEST(PipelineBudgetTest, UnsplitIsRefusedAndTwoStagesTrain) {
  const worker::nn::ModelDescription d =
      *worker::nn::ModelDescription::Parse(kWide);
  absl::StatusOr<int64_t> one =
      MostWorkerBytes(d, worker::nn::StageSplitKind::kBytes, Flags(1));
  absl::StatusOr<int64_t> two =
      MostWorkerBytes(d, worker::nn::StageSplitKind::kBytes, Flags(2));
  ASSERT_TRUE(one.ok() && two.ok());
  ASSERT_LT(*two, *one);
  const int64_t budget = (*one + *two) / 2;

  // The launcher refuses before it starts anything.
  const LaunchConfig unsplit = WideJob(1, budget);
  const absl::Status refused = ValidateLaunchConfig(unsplit);
  ASSERT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& part :
       {absl::StrCat("--worker_memory_budget=", budget),
        absl::StrCat("(", *one, " bytes)"),
        std::string("smallest --pipeline_stages that fits it is 2")}) {
    EXPECT_NE(refused.message().find(part), std::string::npos)
        << part << " in " << refused;
  }
  // So does the worker, past the launcher's check: bad configuration.
  const ClusterResult worker_refused = ::ps::testing::RunCluster(unsplit);
  EXPECT_EQ(worker_refused.ExitCode(), 2) << worker_refused.status;
  EXPECT_NE(worker_refused.status.message().find("--worker_memory_budget"),
            std::string::npos)
      << worker_refused.status;

  // Two stages fit, and each counts, as it builds its stage, what the
  // check measured.
  const LaunchConfig split = WideJob(2, budget);
  ASSERT_TRUE(ValidateLaunchConfig(split).ok()) << ValidateLaunchConfig(split);
  std::vector<std::string> lines;
  const ClusterResult trained = ::ps::testing::RunCluster(split, &lines);
  ASSERT_EQ(trained.ExitCode(), 0) << trained.status;
  ASSERT_TRUE(trained.final_test_accuracy.has_value());
  const std::vector<worker::nn::StageRange> ranges =
      *worker::nn::SplitByParameterBytes(d, 2);
  for (int s = 0; s < 2; ++s) {
    absl::StatusOr<worker::pipeline::WorkerMemory> measured =
        MeasureStage(d, ranges, s, Flags(2));
    ASSERT_TRUE(measured.ok()) << measured.status();
    EXPECT_LE(measured->total(), budget);
    EXPECT_NE(
        ::ps::testing::LineWith(
            lines, absl::StrCat("stage ", s, " of 2, replica 0 of 1: "),
            absl::StrCat("tensor memory ", FormatBytes(measured->total()))),
        "")
        << "stage " << s;
  }
}

}  // namespace
}  // namespace ps
