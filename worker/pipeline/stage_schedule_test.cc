#include "worker/pipeline/stage_schedule.h"

#include <sys/socket.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/local_socket.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/nn/reference_net.h"
#include "worker/nn/stage_model.h"
#include "worker/nn/stage_split.h"
#include "worker/pipeline/schedule_memory.h"

namespace ps::worker::pipeline {
namespace {

namespace ref = ::ps::worker::nn::testing;

std::vector<float> Floats(size_t n, uint64_t seed, double lo, double hi) {
  const std::vector<double> u = ref::Uniform(n, seed, lo, hi);
  return std::vector<float>(u.begin(), u.end());
}

TEST(MicroBatchRowsTest, EvenFirstOnesLargerNoneEmpty) {
  EXPECT_EQ(MicroBatchRows(8, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(MicroBatchRows(10, 4), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(MicroBatchRows(2, 4), (std::vector<int>{1, 1}));
  EXPECT_EQ(MicroBatchRows(5, 1), (std::vector<int>{5}));
}

constexpr char kNet[] =
    "input 2x6x6; conv 3 3x3 pad 1; relu; maxpool 2; flatten; dense 8; "
    "relu; dropout 0.3; dense 4";

struct Whole {
  float loss = 0;
  std::vector<std::vector<float>> gradients;
};

class StageScheduleTest : public ::testing::Test {
 public:
  void SetUp() override {
    description_ = *nn::ModelDescription::Parse(kNet);
    spec_ = description_.Spec(3);
    for (size_t t = 0; t < spec_.tensors.size(); ++t) {
      weights_.push_back(
          Floats(spec_.tensors[t].num_elements(), 20 + t, -.6, .6));
    }
    images_ = Floats(kRows * description_.example_size(), 5, -1, 1);
    for (int r = 0; r < kRows; ++r) labels_.push_back((r * 7) % 4);
  }

  // The unsplit model on the whole batch.
  Whole RunWhole() {
    auto backend = *kernels::CreateCpuBackend();
    nn::ModelOptions options{kRows, 3};
    auto model = *nn::CreateModel(description_, options, backend.get());
    for (size_t t = 0; t < weights_.size(); ++t) {
      EXPECT_TRUE(model->SetWeights(t, weights_[t]).ok());
    }
    Whole w;
    w.gradients.resize(weights_.size());
    w.loss = *model->Forward(images_, labels_, kRows, {kStep, kFirst});
    EXPECT_TRUE(model
                    ->Backward([&](int id, absl::Span<const float> g) {
                      w.gradients[id].assign(g.begin(), g.end());
                      return absl::OkStatus();
                    })
                    .ok());
    return w;
  }

  static constexpr int kRows = 7;
  static constexpr uint64_t kStep = 4;
  static constexpr uint64_t kFirst = 14;
  nn::ModelDescription description_ = *nn::ModelDescription::Parse("4-2");
  ModelSpec spec_;
  std::vector<std::vector<float>> weights_;
  std::vector<float> images_;
  std::vector<float> labels_;
};

struct PipelineRun {
  std::vector<float> losses;
  std::vector<std::vector<std::vector<float>>> grads;  // [stage][tensor].
  std::vector<int> most_in_flight;
  std::vector<int64_t> host_bytes;
};

// K stages in threads joined by socket pairs, as K workers are.
PipelineRun RunPipeline(StageScheduleTest& t, ScheduleKind kind, int stages,
                        int micro_batches) {
  auto ranges = *nn::SplitByParameterBytes(t.description_, stages);
  std::vector<std::unique_ptr<StageLink>> down(stages), up(stages);
  for (int s = 0; s + 1 < stages; ++s) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    down[s] = std::make_unique<StageLink>(std::make_unique<LocalSocket>(fds[0]),
                                          LinkPeer{s + 1, s + 1});
    up[s + 1] = std::make_unique<StageLink>(
        std::make_unique<LocalSocket>(fds[1]), LinkPeer{s, s});
  }
  PipelineRun run;
  run.losses.resize(stages);
  run.grads.resize(stages);
  run.most_in_flight.resize(stages);
  run.host_bytes.resize(stages);
  std::vector<std::thread> threads;
  for (int s = 0; s < stages; ++s) {
    threads.emplace_back([&, s] {
      auto backend = *kernels::CreateCpuBackend();
      nn::ModelOptions options{StageScheduleTest::kRows, 3};
      auto stage = *nn::StageModel::Create(t.description_, ranges[s], options,
                                           backend.get());
      for (int id = ranges[s].first_tensor; id < ranges[s].end_tensor; ++id) {
        EXPECT_TRUE(stage->SetWeights(id, t.weights_[id]).ok());
      }
      StageSchedule schedule(stage.get(), up[s].get(), down[s].get(),
                             {kind, s, stages, micro_batches});
      StepBatch batch{StageScheduleTest::kStep, StageScheduleTest::kRows,
                      StageScheduleTest::kFirst};
      if (s == 0) batch.images = t.images_;
      if (s == stages - 1) batch.labels = t.labels_;
      // Two steps: the second must not carry the first's sums.
      for (int repeat = 0; repeat < 2; ++repeat) {
        absl::StatusOr<float> loss = schedule.Step(batch);
        ASSERT_TRUE(loss.ok()) << loss.status();
        run.losses[s] = *loss;
      }
      run.most_in_flight[s] = schedule.most_in_flight();
      run.host_bytes[s] = schedule.host_bytes();
      for (int id = ranges[s].first_tensor; id < ranges[s].end_tensor; ++id) {
        absl::Span<const float> g = schedule.gradient(id);
        run.grads[s].emplace_back(g.begin(), g.end());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return run;
}

class StagesComputeTheWholeBatchTest
    : public StageScheduleTest,
      public ::testing::WithParamInterface<std::tuple<ScheduleKind, int>> {};

TEST_P(StagesComputeTheWholeBatchTest,
       StagesTogetherComputeTheWholeBatchsGradient) {
  const auto [kind, micro_batches] = GetParam();
  const Whole whole = RunWhole();
  constexpr int kStages = 3;
  auto ranges = *nn::SplitByParameterBytes(description_, kStages);
  const PipelineRun run = RunPipeline(*this, kind, kStages, micro_batches);
  // One micro-batch: the same arithmetic, bit for bit. Several: the layers
  // sum over fewer rows at a time, then the micro-batches are summed in
  // double: a few float roundings of the largest term apart.
  const float tolerance = micro_batches == 1 ? 0.0f : 1e-5f;
  for (int s = 0; s < kStages; ++s) {
    EXPECT_NEAR(run.losses[s], whole.loss, tolerance * 10) << "stage " << s;
    const int m = std::min(micro_batches, kRows);
    EXPECT_EQ(run.most_in_flight[s],
              kind == ScheduleKind::kGpipe ? m : std::min(kStages - s, m))
        << "stage " << s;
    // What the memory budget counts is what the schedule holds, where every
    // micro-batch has the same rows (as --micro_batches dividing the batch
    // makes them).
    if (kRows % m == 0) {
      const int64_t input =
          s == 0 ? description_.example_size() : ranges[s - 1].output_size;
      EXPECT_EQ(run.host_bytes[s],
                ScheduleHostBytes({kind, s, kStages, m}, kRows / m, input,
                                  ranges[s].output_size,
                                  ranges[s].parameter_bytes / 4))
          << "stage " << s;
    }
    for (int t = ranges[s].first_tensor; t < ranges[s].end_tensor; ++t) {
      const std::vector<float>& want = whole.gradients[t];
      const std::vector<float>& got = run.grads[s][t - ranges[s].first_tensor];
      ASSERT_EQ(got.size(), want.size());
      float scale = 0;
      for (float w : want) scale = std::max(scale, std::abs(w));
      for (size_t e = 0; e < want.size(); ++e) {
        EXPECT_NEAR(got[e], want[e], tolerance * scale)
            << spec_.tensors[t].name << "[" << e << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    SchedulesAndMicroBatches, StagesComputeTheWholeBatchTest,
    ::testing::Combine(::testing::Values(ScheduleKind::kGpipe,
                                         ScheduleKind::kOneFOneB),
                       ::testing::Values(1, 3, 7)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param) == ScheduleKind::kGpipe
                              ? "Gpipe"
                              : "OneFOneB",
                          std::get<1>(info.param));
    });

// The micro-batches' backwards come in opposite orders; the sums do not
// depend on it, nor does a recomputed forward differ from the first.
TEST_F(StageScheduleTest, GpipeAndOneFOneBGiveTheSameBits) {
  for (int stages : {2, 3}) {
    for (int micro_batches : {2, 5}) {
      SCOPED_TRACE(
          absl::StrCat(stages, " stages, ", micro_batches, " micro-batches"));
      const PipelineRun gpipe =
          RunPipeline(*this, ScheduleKind::kGpipe, stages, micro_batches);
      const PipelineRun one_f_one_b =
          RunPipeline(*this, ScheduleKind::kOneFOneB, stages, micro_batches);
      EXPECT_EQ(gpipe.losses, one_f_one_b.losses);
      EXPECT_EQ(gpipe.grads, one_f_one_b.grads);
      EXPECT_NE(gpipe.most_in_flight, one_f_one_b.most_in_flight);
    }
  }
}

TEST(StageScheduleFailureTest, ANeighbourThatDiesStopsTheStepNamingIt) {
  auto d = *nn::ModelDescription::Parse("6-5-4");
  auto ranges = *nn::SplitByParameterBytes(d, 2);
  auto backend = *kernels::CreateCpuBackend();
  auto stage = *nn::StageModel::Create(d, ranges[0], {4, 1}, backend.get());
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  StageLink next(std::make_unique<LocalSocket>(fds[0]), LinkPeer{1, 5});
  {
    LocalSocket dead(fds[1]);  // The next stage, gone before it answers.
  }
  StageSchedule schedule(stage.get(), nullptr, &next,
                         {ScheduleKind::kOneFOneB, 0, 2, 2});
  const std::vector<float> images(4 * 6, 0.5f);
  StepBatch batch{0, 4, 0, images};
  absl::StatusOr<float> loss = schedule.Step(batch);
  ASSERT_EQ(loss.status().code(), absl::StatusCode::kAborted) << loss.status();
  EXPECT_NE(loss.status().message().find("stage 1 (rank 5)"),
            std::string::npos);
}

}  // namespace
}  // namespace ps::worker::pipeline
