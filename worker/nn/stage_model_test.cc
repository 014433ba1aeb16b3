#include "worker/nn/stage_model.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/nn/reference_net.h"
#include "worker/nn/stage_split.h"

namespace ps::worker::nn {
namespace {

namespace ref = ::ps::worker::nn::testing;

ModelDescription Describe(const std::string& text) {
  absl::StatusOr<ModelDescription> d = ModelDescription::Parse(text);
  EXPECT_TRUE(d.ok()) << d.status();
  return *d;
}

std::vector<float> Floats(size_t n, uint64_t seed, double lo, double hi) {
  const std::vector<double> u = ref::Uniform(n, seed, lo, hi);
  return std::vector<float>(u.begin(), u.end());
}

// A small CNN with every kind of layer, dropout included.
constexpr char kSmallCnn[] =
    "input 2x8x8; conv 4 3x3 pad 1; relu; maxpool 2; conv 6 3x3; relu; "
    "flatten; dense 12; relu; dropout 0.5; dense 5";

class StageModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    PS_ASSERT_OK_AND_ASSIGN(backend_, kernels::CreateCpuBackend());
  }
  std::unique_ptr<kernels::Backend> backend_;
};

// The stages chained through host memory compute the unsplit model's loss
// and gradients bit for bit: the same layers run on the same inputs, and
// dropout draws its masks from the layer's index in the whole network.
TEST_P(StageModelTest, ChainedStagesMatchTheUnsplitModelBitForBit) {
  const ModelDescription d = Describe(GetParam());
  constexpr int kRows = 6;
  ModelOptions options;
  options.max_batch = kRows;
  options.seed = 7;
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Model> whole,
                          CreateModel(d, options, backend_.get()));
  const ModelSpec spec = d.Spec(options.seed);
  std::vector<std::vector<float>> weights;
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    weights.push_back(Floats(spec.tensors[t].num_elements(), 10 + t, -.5, .5));
    PS_ASSERT_OK(whole->SetWeights(t, weights.back()));
  }
  const std::vector<float> images = Floats(kRows * d.example_size(), 3, -1, 1);
  std::vector<float> labels;
  for (int r = 0; r < kRows; ++r) labels.push_back(r % d.num_classes());
  StepInfo step{/*step=*/5, /*first_example=*/12};
  PS_ASSERT_OK_AND_ASSIGN(float whole_loss,
                          whole->Forward(images, labels, kRows, step));
  std::map<int, std::vector<float>> whole_grads;
  PS_ASSERT_OK(whole->Backward([&](int id, absl::Span<const float> g) {
    whole_grads[id].assign(g.begin(), g.end());
    return absl::OkStatus();
  }));

  for (int k = 2; k <= 3; ++k) {
    SCOPED_TRACE(k);
    PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> ranges,
                            SplitByParameterBytes(d, k));
    std::vector<std::unique_ptr<StageModel>> stages;
    for (const StageRange& r : ranges) {
      PS_ASSERT_OK_AND_ASSIGN(
          std::unique_ptr<StageModel> s,
          StageModel::Create(d, r, options, backend_.get()));
      for (int t = r.first_tensor; t < r.end_tensor; ++t) {
        PS_ASSERT_OK(s->SetWeights(t, weights[t]));
      }
      stages.push_back(std::move(s));
    }
    // Forward, stage by stage.
    std::vector<std::vector<float>> inputs = {images};
    float loss = -1;
    for (auto& s : stages) {
      std::vector<float> out(s->last() ? 0 : kRows * s->output_size());
      PS_ASSERT_OK_AND_ASSIGN(float l, s->Forward(inputs.back(), labels, kRows,
                                                  step, absl::MakeSpan(out)));
      if (s->last()) loss = l;
      inputs.push_back(std::move(out));
    }
    EXPECT_EQ(loss, whole_loss);
    // Backward, last stage first.
    std::vector<float> grad_out;
    std::map<int, std::vector<float>> grads;
    for (int i = k - 1; i >= 0; --i) {
      StageModel& s = *stages[i];
      std::vector<float> grad_in(s.first() ? 0 : kRows * s.input_size());
      PS_ASSERT_OK(s.Backward(
          grad_out,
          [&](int id, absl::Span<const float> g) {
            EXPECT_GE(id, s.range().first_tensor);
            EXPECT_LT(id, s.range().end_tensor);
            grads[id].assign(g.begin(), g.end());
            return absl::OkStatus();
          },
          absl::MakeSpan(grad_in)));
      grad_out = std::move(grad_in);
    }
    ASSERT_EQ(grads.size(), whole_grads.size());
    for (const auto& [id, g] : whole_grads) {
      EXPECT_EQ(grads[id], g) << spec.tensors[id].name;
    }
  }
}

// Chained Evaluate calls count what the unsplit Model::Evaluate counts (in
// evaluation mode: the dropout layer passes its input through).
TEST_P(StageModelTest, ChainedEvaluationCountsAsTheUnsplitModel) {
  const ModelDescription d = Describe(GetParam());
  constexpr int kRows = 40;
  ModelOptions options;
  options.max_batch = kRows;
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Model> whole,
                          CreateModel(d, options, backend_.get()));
  const ModelSpec spec = d.Spec(options.seed);
  std::vector<std::vector<float>> weights;
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    weights.push_back(Floats(spec.tensors[t].num_elements(), 20 + t, -.5, .5));
    PS_ASSERT_OK(whole->SetWeights(t, weights.back()));
  }
  const std::vector<float> images = Floats(kRows * d.example_size(), 4, -1, 1);
  std::vector<float> labels;
  for (int r = 0; r < kRows; ++r) labels.push_back((r * 7) % d.num_classes());
  PS_ASSERT_OK_AND_ASSIGN(int64_t want, whole->Evaluate(images, labels, kRows));
  ASSERT_GT(want, 0) << "a count of 0 would not tell much";
  ASSERT_LT(want, kRows);
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> ranges,
                          SplitByParameterBytes(d, 2));
  std::vector<float> x = images;
  int64_t correct = -1;
  for (const StageRange& r : ranges) {
    PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<StageModel> s,
                            StageModel::Create(d, r, options, backend_.get()));
    for (int t = r.first_tensor; t < r.end_tensor; ++t) {
      PS_ASSERT_OK(s->SetWeights(t, weights[t]));
    }
    std::vector<float> out(s->last() ? 0 : kRows * s->output_size());
    PS_ASSERT_OK_AND_ASSIGN(int64_t n,
                            s->Evaluate(x, labels, kRows, absl::MakeSpan(out)));
    if (s->last()) correct = n;
    x = std::move(out);
  }
  EXPECT_EQ(correct, want);
}

INSTANTIATE_TEST_SUITE_P(Networks, StageModelTest,
                         ::testing::Values(std::string(kSmallCnn),
                                           std::string("16-12-8-4")));

TEST(StageModelChecksTest, RefusesAnotherStagesTensorAndBadSizes) {
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::Backend> backend,
                          kernels::CreateCpuBackend());
  const ModelDescription d = Describe("16-12-8-4");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> ranges,
                          SplitByParameterBytes(d, 2));
  ModelOptions options;
  options.max_batch = 4;
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<StageModel> second,
      StageModel::Create(d, ranges[1], options, backend.get()));
  EXPECT_FALSE(second->first());
  EXPECT_TRUE(second->last());
  EXPECT_EQ(second->SetWeights(ranges[0].first_tensor, {1.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> input(2 * second->input_size(), 0.5f);
  EXPECT_EQ(second->Forward(input, {0, 9}, 2, {}, {}).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "label 9 is not a class";
  EXPECT_EQ(second->Forward(input, {0, 1}, 3, {}, {}).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "3 rows of 2 rows' input";
  std::vector<float> grad_in(2 * second->input_size());
  EXPECT_EQ(second->Backward({}, nullptr, absl::MakeSpan(grad_in)).code(),
            absl::StatusCode::kFailedPrecondition)
      << "no forward yet";
  StageRange bad = ranges[1];
  bad.end_layer = 99;
  EXPECT_FALSE(StageModel::Create(d, bad, options, backend.get()).ok());
}

}  // namespace
}  // namespace ps::worker::nn
