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

// The figures below are of the split by parameter bytes.
constexpr nn::StageSplitKind kBytes = nn::StageSplitKind::kBytes;

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

MemoryFlags Flags(int stages, int batch_size, int micro_batches,
                  ScheduleKind schedule = ScheduleKind::kGpipe,
                  bool topk = false) {
  MemoryFlags flags;
  flags.stages = stages;
  flags.batch_size = batch_size;
  flags.micro_batches = micro_batches;
  flags.schedule = schedule;
  flags.topk = topk;
  return flags;
}

// What the budget check measures is what a worker's stage allocates when
// built on its real backend.
TEST(MemoryBudgetTest, TheMeasureIsWhatARealStageCounts) {
  const nn::ModelDescription d = *nn::ModelDescription::Parse("20-16-12-4");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<nn::StageRange> ranges,
                          nn::SplitByParameterBytes(d, 2));
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::Backend> cpu,
                          kernels::CreateCpuBackend());
  const MemoryFlags flags = Flags(2, 8, 1);
  for (int s = 0; s < 2; ++s) {
    PS_ASSERT_OK_AND_ASSIGN(WorkerMemory measured,
                            MeasureStage(d, ranges, s, flags));
    CountingBackend counted(cpu.get());
    nn::ModelOptions options;
    options.max_batch = 8;
    PS_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<nn::StageModel> stage,
        nn::StageModel::Create(d, ranges[s], options, &counted));
    const WorkerMemory real = CountedMemory(d, *stage, s, flags, counted);
    EXPECT_EQ(measured.backend_bytes, real.backend_bytes);
    EXPECT_EQ(measured.host_bytes, real.host_bytes);
    EXPECT_EQ(measured.pulled_bytes, ranges[s].parameter_bytes);
    EXPECT_EQ(measured.schedule_bytes, real.schedule_bytes);
    EXPECT_EQ(measured.total(), real.total());
  }
  EXPECT_EQ(RowsPerMicroBatch(1, 64, 1), 64);
  EXPECT_EQ(RowsPerMicroBatch(2, 64, 4), 16);
}

// The parts besides the stage model, derived by hand for 20-16-12-4 split
// by bytes into dense 16 (336 parameters: 20 x 16 + 16) and dense 12,
// dense 4 (204 + 52 = 256), which send 16 floats per example between them.
TEST(MemoryBudgetTest, ScheduleAndResidualBytesAreDerived) {
  const nn::ModelDescription d = *nn::ModelDescription::Parse("20-16-12-4");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<nn::StageRange> ranges,
                          nn::SplitByParameterBytes(d, 2));
  ASSERT_EQ(ranges[0].parameter_bytes, 336 * 4);
  ASSERT_EQ(ranges[1].parameter_bytes, 256 * 4);
  ASSERT_EQ(ranges[0].output_size, 16);

  // M = 1, 8 rows: stage 0 keeps its output and the gradient it receives
  // (8 x 16 floats each) and its summed gradients (336 floats); stage 1
  // the input it received and the gradient it sends (8 x 16 each) and its
  // 256. One micro-batch: no double sums, no recomputed forward.
  PS_ASSERT_OK_AND_ASSIGN(WorkerMemory one0,
                          MeasureStage(d, ranges, 0, Flags(2, 8, 1)));
  PS_ASSERT_OK_AND_ASSIGN(WorkerMemory one1,
                          MeasureStage(d, ranges, 1, Flags(2, 8, 1)));
  EXPECT_EQ(one0.schedule_bytes, 4 * (2 * 8 * 16 + 336));
  EXPECT_EQ(one1.schedule_bytes, 4 * (2 * 8 * 16 + 256));
  EXPECT_EQ(one0.scratch_bytes, 0) << "no convolution";
  EXPECT_EQ(one0.compression_bytes, 0);

  // M = 4 under GPipe, 2 rows each: stage 0 also recomputes the forwards
  // of micro-batches 2, 1, 0 before their backwards (one more 2 x 16
  // buffer), and sums in double along the tree ((3 + 2) + (1 + 0)): 3
  // buffers at most (3 and 2 merged, then 1, then 0 before 1 + 0 merge).
  // Stage 1 holds the 4 micro-batches' inputs at once.
  PS_ASSERT_OK_AND_ASSIGN(WorkerMemory four0,
                          MeasureStage(d, ranges, 0, Flags(2, 8, 4)));
  PS_ASSERT_OK_AND_ASSIGN(WorkerMemory four1,
                          MeasureStage(d, ranges, 1, Flags(2, 8, 4)));
  EXPECT_EQ(four0.schedule_bytes, 4 * (3 * 2 * 16 + 336) + 8 * 3 * 336);
  EXPECT_EQ(four1.schedule_bytes, 4 * ((4 + 1) * 2 * 16 + 256) + 8 * 3 * 256);
  // Under 1F1B the last stage runs each backward right after its forward:
  // one input at a time.
  PS_ASSERT_OK_AND_ASSIGN(
      WorkerMemory f1b1,
      MeasureStage(d, ranges, 1, Flags(2, 8, 4, ScheduleKind::kOneFOneB)));
  EXPECT_EQ(f1b1.schedule_bytes, 4 * ((1 + 1) * 2 * 16 + 256) + 8 * 3 * 256);

  // Top-k: 3 floats per parameter (the residual, the push's next one, the
  // dense values sent).
  PS_ASSERT_OK_AND_ASSIGN(
      WorkerMemory topk,
      MeasureStage(d, ranges, 0,
                   Flags(2, 8, 1, ScheduleKind::kGpipe, /*topk=*/true)));
  EXPECT_EQ(topk.compression_bytes, 3 * 336 * 4);
  EXPECT_EQ(topk.total(), one0.total() + 3 * 336 * 4);

  // Unsplit: no schedule at all.
  PS_ASSERT_OK_AND_ASSIGN(std::vector<nn::StageRange> whole,
                          nn::SplitByParameterBytes(d, 1));
  PS_ASSERT_OK_AND_ASSIGN(WorkerMemory unsplit,
                          MeasureStage(d, whole, 0, Flags(1, 8, 1)));
  EXPECT_EQ(unsplit.schedule_bytes, 0);
}

// The convolution scratch counted is what the CPU backend holds after a
// step: one image's im2col matrix of the largest convolution, here 2
// channels x 3 x 3 taps x 6 x 6 positions = 648 floats.
TEST(MemoryBudgetTest, ConvolutionScratchIsWhatTheCpuBackendHolds) {
  const nn::ModelDescription d = *nn::ModelDescription::Parse(
      "input 2x6x6; conv 3 3x3 pad 1; relu; conv 2 1x1; flatten; dense 4");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<nn::StageRange> whole,
                          nn::SplitByParameterBytes(d, 1));
  PS_ASSERT_OK_AND_ASSIGN(WorkerMemory measured,
                          MeasureStage(d, whole, 0, Flags(1, 5, 1)));
  EXPECT_EQ(measured.scratch_bytes, 648 * 4);

  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::Backend> cpu,
                          kernels::CreateCpuBackend());
  nn::ModelOptions options;
  options.max_batch = 5;
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<nn::StageModel> stage,
      nn::StageModel::Create(d, whole[0], options, cpu.get()));
  EXPECT_EQ(cpu->conv_scratch_bytes(), 0) << "grown by the first step";
  const std::vector<float> images(5 * 72, 0.25f);
  const std::vector<float> labels = {0, 1, 2, 3, 0};
  PS_ASSERT_OK_AND_ASSIGN(float loss,
                          stage->Forward(images, labels, 5, {0, 0}, {}));
  (void)loss;
  PS_ASSERT_OK(stage->Backward(
      {}, [](int, absl::Span<const float>) { return absl::OkStatus(); }, {}));
  EXPECT_EQ(cpu->conv_scratch_bytes(), measured.scratch_bytes);
}

// A wide MLP that one worker cannot hold at batch 256 under the budget,
// but two stages can: refused unsplit, naming the budget, the bytes and the
// stages that fit.
TEST(MemoryBudgetTest, RefusesUnsplitNamingTheStagesThatFit) {
  const nn::ModelDescription d =
      *nn::ModelDescription::Parse("784-4096-4096-4096-10");
  PS_ASSERT_OK_AND_ASSIGN(int64_t one,
                          MostWorkerBytes(d, kBytes, Flags(1, 256, 1)));
  PS_ASSERT_OK_AND_ASSIGN(int64_t two,
                          MostWorkerBytes(d, kBytes, Flags(2, 256, 1)));
  PS_ASSERT_OK_AND_ASSIGN(int64_t four,
                          MostWorkerBytes(d, kBytes, Flags(4, 256, 1)));
  // The figures bench/README.md quotes.
  std::printf(
      "784-4096-4096-4096-10 at batch 256, bytes per worker: K=1 %lld, "
      "K=2 %lld, K=4 %lld\n",
      static_cast<long long>(one), static_cast<long long>(two),
      static_cast<long long>(four));
  PS_ASSERT_OK_AND_ASSIGN(int64_t two_m4,
                          MostWorkerBytes(d, kBytes, Flags(2, 256, 4)));
  PS_ASSERT_OK_AND_ASSIGN(int64_t four_m4,
                          MostWorkerBytes(d, kBytes, Flags(4, 256, 4)));
  std::printf("  with 4 micro-batches: K=2 %lld, K=4 %lld\n",
              static_cast<long long>(two_m4), static_cast<long long>(four_m4));
  PS_ASSERT_OK_AND_ASSIGN(
      int64_t two_topk,
      MostWorkerBytes(d, kBytes,
                      Flags(2, 256, 1, ScheduleKind::kGpipe, /*topk=*/true)));
  std::printf("  with --compression=topk: K=2 %lld\n",
              static_cast<long long>(two_topk));
  EXPECT_LT(two, one);
  EXPECT_LT(four, two);
  const int64_t budget = (one + two) / 2;
  absl::Status unsplit = CheckMemoryBudget(d, kBytes, Flags(1, 256, 1), budget);
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
  EXPECT_TRUE(CheckMemoryBudget(d, kBytes, Flags(2, 256, 1), budget).ok());
  EXPECT_TRUE(CheckMemoryBudget(d, kBytes, Flags(1, 256, 1), 0).ok())
      << "0: no budget";
  EXPECT_NE(std::string(
                CheckMemoryBudget(d, kBytes, Flags(1, 256, 1), 1024).message())
                .find("no split into pipeline stages fits it"),
            std::string::npos);
}

}  // namespace
}  // namespace ps::worker::pipeline
