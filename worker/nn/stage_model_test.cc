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

  // The unsplit model of GetParam() with weights drawn from `weight_seed`
  // on, and a batch of `rows` images (from `image_seed`) whose row r has the
  // label (r * label_stride) % classes.
  void MakeWhole(int rows, uint64_t weight_seed, uint64_t image_seed,
                 int label_stride) {
    options_.max_batch = rows;
    PS_ASSERT_OK_AND_ASSIGN(whole_, CreateModel(d_, options_, backend_.get()));
    const ModelSpec spec = d_.Spec(options_.seed);
    for (size_t t = 0; t < spec.tensors.size(); ++t) {
      weights_.push_back(
          Floats(spec.tensors[t].num_elements(), weight_seed + t, -.5, .5));
      PS_ASSERT_OK(whole_->SetWeights(t, weights_.back()));
    }
    images_ = Floats(rows * d_.example_size(), image_seed, -1, 1);
    for (int r = 0; r < rows; ++r) {
      labels_.push_back((r * label_stride) % d_.num_classes());
    }
  }

  // Stage `range` of the model, holding the whole model's weights of its
  // tensors.
  void MakeStage(const StageRange& range, std::unique_ptr<StageModel>* out) {
    PS_ASSERT_OK_AND_ASSIGN(
        *out, StageModel::Create(d_, range, options_, backend_.get()));
    for (int t = range.first_tensor; t < range.end_tensor; ++t) {
      PS_ASSERT_OK((*out)->SetWeights(t, weights_[t]));
    }
  }

  std::unique_ptr<kernels::Backend> backend_;
  const ModelDescription d_ = Describe(GetParam());
  ModelOptions options_;
  std::unique_ptr<Model> whole_;
  std::vector<std::vector<float>> weights_;
  std::vector<float> images_;
  std::vector<float> labels_;
};

// The stages chained through host memory compute the unsplit model's loss
// and gradients bit for bit: the same layers run on the same inputs, and
// dropout draws its masks from the layer's index in the whole network.
TEST_P(StageModelTest, ChainedStagesMatchTheUnsplitModelBitForBit) {
  constexpr int kRows = 6;
  options_.seed = 7;
  ASSERT_NO_FATAL_FAILURE(MakeWhole(kRows, /*weight_seed=*/10,
                                    /*image_seed=*/3, /*label_stride=*/1));
  const ModelSpec spec = d_.Spec(options_.seed);
  StepInfo step{/*step=*/5, /*first_example=*/12};
  PS_ASSERT_OK_AND_ASSIGN(float whole_loss,
                          whole_->Forward(images_, labels_, kRows, step));
  std::map<int, std::vector<float>> whole_grads;
  PS_ASSERT_OK(whole_->Backward([&](int id, absl::Span<const float> g) {
    whole_grads[id].assign(g.begin(), g.end());
    return absl::OkStatus();
  }));

  for (int k = 2; k <= 3; ++k) {
    SCOPED_TRACE(k);
    PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> ranges,
                            SplitByParameterBytes(d_, k));
    std::vector<std::unique_ptr<StageModel>> stages(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      ASSERT_NO_FATAL_FAILURE(MakeStage(ranges[i], &stages[i]));
    }
    // Forward, stage by stage.
    std::vector<std::vector<float>> inputs = {images_};
    float loss = -1;
    for (auto& s : stages) {
      std::vector<float> out(s->last() ? 0 : kRows * s->output_size());
      PS_ASSERT_OK_AND_ASSIGN(float l, s->Forward(inputs.back(), labels_, kRows,
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
  constexpr int kRows = 40;
  ASSERT_NO_FATAL_FAILURE(MakeWhole(kRows, /*weight_seed=*/20,
                                    /*image_seed=*/4, /*label_stride=*/7));
  PS_ASSERT_OK_AND_ASSIGN(int64_t want,
                          whole_->Evaluate(images_, labels_, kRows));
  ASSERT_GT(want, 0) << "a count of 0 would not tell much";
  ASSERT_LT(want, kRows);
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> ranges,
                          SplitByParameterBytes(d_, 2));
  std::vector<float> x = images_;
  int64_t correct = -1;
  for (const StageRange& r : ranges) {
    std::unique_ptr<StageModel> s;
    ASSERT_NO_FATAL_FAILURE(MakeStage(r, &s));
    std::vector<float> out(s->last() ? 0 : kRows * s->output_size());
    PS_ASSERT_OK_AND_ASSIGN(
        int64_t n, s->Evaluate(x, labels_, kRows, absl::MakeSpan(out)));
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

TEST(StageModelChecksTest, RefusesWhatCreateModelRefusesNamingItself) {
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<kernels::Backend> backend,
                          kernels::CreateCpuBackend());
  const ModelDescription d = Describe("16-12-8-4");
  PS_ASSERT_OK_AND_ASSIGN(std::vector<StageRange> ranges,
                          SplitByParameterBytes(d, 2));
  ModelOptions options;
  for (int max_batch : {0, (1 << 20) + 1}) {
    options.max_batch = max_batch;
    absl::Status s =
        StageModel::Create(d, ranges[0], options, backend.get()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << max_batch;
    EXPECT_EQ(s.message().find("StageModel: max batch"), 0u) << s;
    EXPECT_EQ(s, CheckModelArguments("StageModel", options, backend.get()));
  }
  options.max_batch = 4;
  absl::Status s = StageModel::Create(d, ranges[0], options, nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "StageModel: no backend");
  EXPECT_TRUE(CheckModelArguments("StageModel", options, backend.get()).ok());
}

}  // namespace
}  // namespace ps::worker::nn
