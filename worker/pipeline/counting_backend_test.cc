#include "worker/pipeline/counting_backend.h"

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_model.h"
#include "worker/nn/stage_split.h"

namespace ps::worker::pipeline {
namespace {

TEST(CountingBackendTest, CountsEachBufferItHandsOutAndForwards) {
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::Backend> cpu,
                          kernels::CreateCpuBackend());
  CountingBackend counting(cpu.get());
  EXPECT_EQ(counting.name(), cpu->name());
  int64_t want = 0;
  std::vector<std::unique_ptr<kernels::DeviceBuffer>> kept;
  for (size_t n : {1, 7, 1000}) {
    PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::DeviceBuffer> b,
                            counting.Allocate(n));
    ASSERT_EQ(b->size(), n);
    want += static_cast<int64_t>(b->size() * sizeof(float));
    EXPECT_EQ(counting.allocated_bytes(), want);
    kept.push_back(std::move(b));
  }
  // The buffers are the CPU backend's own: its operations work on them.
  const std::vector<float> x = {1, -2, 3, -4, 5, -6, 7};
  PS_ASSERT_OK(counting.CopyToDevice(x.data(), x.size(), *kept[1], 0));
  PS_ASSERT_OK(counting.Relu(x.size(), *kept[1], *kept[1]));
  std::vector<float> y(x.size());
  PS_ASSERT_OK(counting.CopyToHost(*kept[1], 0, y.size(), y.data()));
  EXPECT_EQ(y, (std::vector<float>{1, 0, 3, 0, 5, 0, 7}));
}

// A stage built on the measuring backend (no memory) counts exactly what
// the same stage allocates on a real backend, and the real one computes
// what a stage on the bare backend computes.
TEST(CountingBackendTest, MeasuringCountsWhatARealBuildAllocates) {
  const nn::ModelDescription d = *nn::ModelDescription::Parse(
      "input 1x8x8; conv 3 3x3; relu; maxpool 2; flatten; dense 6; relu; "
      "dense 4");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<nn::StageRange> ranges,
                          nn::SplitByParameterBytes(d, 2));
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::Backend> cpu,
                          kernels::CreateCpuBackend());
  nn::ModelOptions options;
  options.max_batch = 5;
  for (const nn::StageRange& range : ranges) {
    CountingBackend measuring(nullptr);
    CountingBackend real(cpu.get());
    PS_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<nn::StageModel> measured,
        nn::StageModel::Create(d, range, options, &measuring));
    PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<nn::StageModel> built,
                            nn::StageModel::Create(d, range, options, &real));
    EXPECT_EQ(measuring.allocated_bytes(), real.allocated_bytes());
    // Parameters and their gradients at least, and activations besides.
    EXPECT_GT(real.allocated_bytes(), 2 * range.parameter_bytes);
    EXPECT_EQ(measured->host_bytes(), built->host_bytes());
  }
  // More rows, more activations: the count follows the build.
  CountingBackend small(nullptr), large(nullptr);
  options.max_batch = 1;
  ASSERT_TRUE(nn::StageModel::Create(d, ranges[0], options, &small).ok());
  options.max_batch = 10;
  ASSERT_TRUE(nn::StageModel::Create(d, ranges[0], options, &large).ok());
  EXPECT_LT(small.allocated_bytes(), large.allocated_bytes());
}

TEST(CountingBackendTest, AStageOnItComputesAsOnTheBareBackend) {
  const nn::ModelDescription d = *nn::ModelDescription::Parse("6-5-3");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<nn::StageRange> ranges,
                          nn::SplitByParameterBytes(d, 1));
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::Backend> cpu,
                          kernels::CreateCpuBackend());
  CountingBackend counting(cpu.get());
  nn::ModelOptions options;
  options.max_batch = 2;
  float losses[2];
  int i = 0;
  for (kernels::Backend* backend :
       {cpu.get(), static_cast<kernels::Backend*>(&counting)}) {
    PS_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<nn::StageModel> stage,
        nn::StageModel::Create(d, ranges[0], options, backend));
    const ModelSpec spec = d.Spec(1);
    for (int t = 0; t < static_cast<int>(spec.tensors.size()); ++t) {
      std::vector<float> w(spec.tensors[t].num_elements());
      for (size_t e = 0; e < w.size(); ++e) w[e] = 0.1f * ((e + t) % 7) - 0.3f;
      PS_ASSERT_OK(stage->SetWeights(t, w));
    }
    const std::vector<float> x = {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
    PS_ASSERT_OK_AND_ASSIGN(losses[i++], stage->Forward(x, {0, 2}, 2, {}, {}));
  }
  EXPECT_EQ(losses[0], losses[1]);
}

}  // namespace
}  // namespace ps::worker::pipeline
