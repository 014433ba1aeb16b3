#include "worker/pipeline/gpipe_schedule.h"

#include <sys/socket.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "common/local_socket.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/nn/reference_net.h"
#include "worker/nn/stage_model.h"
#include "worker/nn/stage_split.h"

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

class GpipeScheduleTest : public ::testing::TestWithParam<int> {
 protected:
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

// K stages in threads joined by socket pairs, as K workers are.
TEST_P(GpipeScheduleTest, StagesTogetherComputeTheWholeBatchsGradient) {
  const int micro_batches = GetParam();
  const Whole whole = RunWhole();
  constexpr int kStages = 3;
  auto ranges = *nn::SplitByParameterBytes(description_, kStages);
  std::vector<std::unique_ptr<StageLink>> down(kStages), up(kStages);
  for (int s = 0; s + 1 < kStages; ++s) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    down[s] = std::make_unique<StageLink>(std::make_unique<LocalSocket>(fds[0]),
                                          LinkPeer{s + 1, s + 1});
    up[s + 1] = std::make_unique<StageLink>(
        std::make_unique<LocalSocket>(fds[1]), LinkPeer{s, s});
  }
  std::vector<float> losses(kStages);
  std::vector<std::vector<std::vector<float>>> grads(kStages);
  std::vector<std::thread> threads;
  for (int s = 0; s < kStages; ++s) {
    threads.emplace_back([&, s] {
      auto backend = *kernels::CreateCpuBackend();
      nn::ModelOptions options{kRows, 3};
      auto stage = *nn::StageModel::Create(description_, ranges[s], options,
                                           backend.get());
      for (int t = ranges[s].first_tensor; t < ranges[s].end_tensor; ++t) {
        EXPECT_TRUE(stage->SetWeights(t, weights_[t]).ok());
      }
      GpipeSchedule schedule(stage.get(), up[s].get(), down[s].get(),
                             micro_batches);
      StepBatch batch{kStep, kRows, kFirst};
      if (s == 0) batch.images = images_;
      if (s == kStages - 1) batch.labels = labels_;
      // Two steps: the second must not carry the first's sums.
      for (int repeat = 0; repeat < 2; ++repeat) {
        absl::StatusOr<float> loss = schedule.Step(batch);
        ASSERT_TRUE(loss.ok()) << loss.status();
        losses[s] = *loss;
      }
      for (int t = ranges[s].first_tensor; t < ranges[s].end_tensor; ++t) {
        absl::Span<const float> g = schedule.gradient(t);
        grads[s].emplace_back(g.begin(), g.end());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // One micro-batch: the same arithmetic, bit for bit. Several: the layers
  // sum over fewer rows at a time, then the micro-batches are summed in
  // double: a few float roundings of the largest term apart.
  const float tolerance = micro_batches == 1 ? 0.0f : 1e-5f;
  for (int s = 0; s < kStages; ++s) {
    EXPECT_NEAR(losses[s], whole.loss, tolerance * 10) << "stage " << s;
    for (int t = ranges[s].first_tensor; t < ranges[s].end_tensor; ++t) {
      const std::vector<float>& want = whole.gradients[t];
      const std::vector<float>& got = grads[s][t - ranges[s].first_tensor];
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

INSTANTIATE_TEST_SUITE_P(MicroBatches, GpipeScheduleTest,
                         ::testing::Values(1, 3, 7));

TEST(GpipeScheduleFailureTest, ANeighbourThatDiesStopsTheStepNamingIt) {
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
  GpipeSchedule schedule(stage.get(), nullptr, &next, 2);
  const std::vector<float> images(4 * 6, 0.5f);
  StepBatch batch{0, 4, 0, images};
  absl::StatusOr<float> loss = schedule.Step(batch);
  ASSERT_EQ(loss.status().code(), absl::StatusCode::kAborted) << loss.status();
  EXPECT_NE(loss.status().message().find("stage 1 (rank 5)"),
            std::string::npos);
}

}  // namespace
}  // namespace ps::worker::pipeline
