#include "worker/pipeline/memory_budget.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_model.h"
#include "worker/nn/stage_split.h"
#include "worker/pipeline/counting_backend.h"

namespace ps::worker::pipeline {
namespace {

TEST(ParseByteSizeTest, TakesBytesWithBinarySuffixes) {
  EXPECT_EQ(*ParseByteSize("0"), 0);
  EXPECT_EQ(*ParseByteSize("512"), 512);
  EXPECT_EQ(*ParseByteSize("4K"), 4096);
  EXPECT_EQ(*ParseByteSize("3M"), 3 << 20);
  EXPECT_EQ(*ParseByteSize("2g"), int64_t{2} << 30);
  for (const char* bad : {"", "K", "-1", "1.5M", "12X", "M1", "99999999999G"}) {
    absl::StatusOr<int64_t> parsed = ParseByteSize(bad);
    ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_NE(parsed.status().message().find("--worker_memory_budget"),
              std::string::npos);
  }
}

// What the budget check measures is what a worker's stage allocates when
// built on its real backend.
TEST(MemoryBudgetTest, TheMeasureIsWhatARealStageCounts) {
  const nn::ModelDescription d = *nn::ModelDescription::Parse("20-16-12-4");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<nn::StageRange> ranges,
                          nn::SplitByParameterBytes(d, 2));
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::Backend> cpu,
                          kernels::CreateCpuBackend());
  for (const nn::StageRange& range : ranges) {
    PS_ASSERT_OK_AND_ASSIGN(WorkerMemory measured, MeasureStage(d, range, 8));
    CountingBackend counted(cpu.get());
    nn::ModelOptions options;
    options.max_batch = 8;
    PS_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<nn::StageModel> stage,
        nn::StageModel::Create(d, range, options, &counted));
    const WorkerMemory real = CountedMemory(*stage, counted);
    EXPECT_EQ(measured.backend_bytes, real.backend_bytes);
    EXPECT_EQ(measured.host_bytes, real.host_bytes);
    EXPECT_EQ(measured.pulled_bytes, range.parameter_bytes);
    EXPECT_EQ(measured.total(), real.total());
  }
  EXPECT_EQ(RowsPerMicroBatch(1, 64, 1), 64);
  EXPECT_EQ(RowsPerMicroBatch(2, 64, 4), 16);
}

// A wide MLP that one worker cannot hold at batch 256 under the budget,
// but two stages can: refused unsplit, naming the budget, the bytes and the
// stages that fit.
TEST(MemoryBudgetTest, RefusesUnsplitNamingTheStagesThatFit) {
  const nn::ModelDescription d =
      *nn::ModelDescription::Parse("784-4096-4096-4096-10");
  PS_ASSERT_OK_AND_ASSIGN(int64_t one, MostWorkerBytes(d, 1, 256, 1));
  PS_ASSERT_OK_AND_ASSIGN(int64_t two, MostWorkerBytes(d, 2, 256, 1));
  PS_ASSERT_OK_AND_ASSIGN(int64_t four, MostWorkerBytes(d, 4, 256, 1));
  // The figures bench/README.md quotes.
  std::printf(
      "784-4096-4096-4096-10 at batch 256, bytes per worker: K=1 %lld, "
      "K=2 %lld, K=4 %lld\n",
      static_cast<long long>(one), static_cast<long long>(two),
      static_cast<long long>(four));
  PS_ASSERT_OK_AND_ASSIGN(int64_t two_m4, MostWorkerBytes(d, 2, 256, 4));
  PS_ASSERT_OK_AND_ASSIGN(int64_t four_m4, MostWorkerBytes(d, 4, 256, 4));
  std::printf("  with 4 micro-batches: K=2 %lld, K=4 %lld\n",
              static_cast<long long>(two_m4), static_cast<long long>(four_m4));
  EXPECT_LT(two_m4, two) << "a micro-batch's activations, not a batch's";
  EXPECT_LT(two, one);
  EXPECT_LT(four, two);
  const int64_t budget = (one + two) / 2;
  absl::Status unsplit = CheckMemoryBudget(d, 1, 256, 1, budget);
  ASSERT_EQ(unsplit.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(unsplit.message());
  EXPECT_NE(message.find(absl::StrCat("--worker_memory_budget=", budget)),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(absl::StrCat("(", one, " bytes)")), std::string::npos)
      << message;
  EXPECT_NE(message.find("smallest --pipeline_stages that fits it is 2"),
            std::string::npos)
      << message;
  EXPECT_TRUE(CheckMemoryBudget(d, 2, 256, 1, budget).ok());
  EXPECT_TRUE(CheckMemoryBudget(d, 1, 256, 1, 0).ok()) << "0: no budget";
  EXPECT_NE(std::string(CheckMemoryBudget(d, 1, 256, 1, 1024).message())
                .find("no split into pipeline stages fits it"),
            std::string::npos);
}

}  // namespace
}  // namespace ps::worker::pipeline
