#include "worker/nn/model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "worker/mlp.h"
#include "worker/nn/model_description.h"
#include "worker/nn/reference_net.h"

namespace ps::worker::nn {
namespace {

namespace ref = ::ps::worker::nn::testing;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kFailedPrecondition = absl::StatusCode::kFailedPrecondition;

ModelDescription Describe(const std::string& text) {
  absl::StatusOr<ModelDescription> d = ModelDescription::Parse(text);
  EXPECT_TRUE(d.ok()) << d.status();
  return *d;
}

std::vector<float> ToFloat(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

std::vector<float> RandomLabels(int n, int classes, uint64_t seed) {
  std::vector<float> labels;
  for (double u : ref::Uniform(n, seed, 0, classes)) {
    labels.push_back(std::min<float>(std::floor(u), classes - 1));
  }
  return labels;
}

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PS_ASSERT_OK_AND_ASSIGN(backend_, kernels::CreateCpuBackend());
  }

  std::unique_ptr<Model> Make(const std::string& text, int max_batch,
                              uint64_t seed = 1) {
    ModelOptions options;
    options.max_batch = max_batch;
    options.seed = seed;
    absl::StatusOr<std::unique_ptr<Model>> model =
        CreateModel(Describe(text), options, backend_.get());
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }

  // Random weights and biases (non-zero biases, so their gradients matter),
  // set on `model` and returned in double.
  ref::Params SetRandomWeights(Model& model, uint64_t seed) {
    ref::Params params;
    for (size_t id = 0; id < model.spec().tensors.size(); ++id) {
      params.push_back(ref::Uniform(model.spec().tensors[id].num_elements(),
                                    seed * 100 + id, -0.8, 0.8));
      EXPECT_TRUE(model.SetWeights(id, ToFloat(params.back())).ok());
    }
    return params;
  }

  std::unique_ptr<kernels::Backend> backend_;
};

// The trainer can switch from worker::Mlp to a Model without changing a
// bit: same backend calls, in the same order, on the same buffers' values.
TEST_F(ModelTest, MlpFromLayerSizesComputesExactlyWhatWorkerMlpDoes) {
  for (const std::string sizes_text : {"784-256-128-10", "5-3", "5-4-4-3"}) {
    SCOPED_TRACE(sizes_text);
    const std::vector<int> sizes = *ParseLayerSizes(sizes_text);
    constexpr int kMaxBatch = 40;
    PS_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<worker::Mlp> mlp,
        worker::Mlp::Create(MlpModelSpec(sizes), kMaxBatch, backend_.get()));
    std::unique_ptr<Model> model = Make(sizes_text, kMaxBatch);
    ASSERT_NE(model, nullptr);
    ASSERT_TRUE(
        CompareModelSpecs(mlp->spec(), "Mlp", model->spec(), "Model").ok());
    SetRandomWeights(*model, 3);
    for (int id = 0; id < model->spec().tensors.size(); ++id) {
      const std::vector<float> w = ToFloat(ref::Uniform(
          model->spec().tensors[id].num_elements(), 300 + id, -0.8, 0.8));
      PS_ASSERT_OK(mlp->SetWeights(id, w));
    }
    for (int batch : {kMaxBatch, 7, 1}) {
      SCOPED_TRACE(absl::StrCat("batch ", batch));
      const std::vector<float> images =
          ToFloat(ref::Uniform(batch * sizes[0], batch));
      const std::vector<float> labels =
          RandomLabels(batch, sizes.back(), batch + 1);
      PS_ASSERT_OK_AND_ASSIGN(float want,
                              mlp->ForwardBackward(images, labels, batch));
      PS_ASSERT_OK_AND_ASSIGN(float got, model->Forward(images, labels, batch));
      EXPECT_EQ(got, want);
      PS_ASSERT_OK(model->Backward(nullptr));
      for (int id = 0; id < model->spec().tensors.size(); ++id) {
        std::vector<float> mlp_gradient(
            model->spec().tensors[id].num_elements());
        PS_ASSERT_OK(mlp->GetGradient(id, absl::MakeSpan(mlp_gradient)));
        PS_ASSERT_OK_AND_ASSIGN(absl::Span<const float> gradient,
                                model->Gradient(id));
        EXPECT_TRUE(std::equal(gradient.begin(), gradient.end(),
                               mlp_gradient.begin(), mlp_gradient.end()))
            << model->spec().tensors[id].name;
      }
      PS_ASSERT_OK_AND_ASSIGN(int want_correct,
                              mlp->Evaluate(images, labels, batch));
      PS_ASSERT_OK_AND_ASSIGN(int64_t correct,
                              model->Evaluate(images, labels, batch));
      EXPECT_EQ(correct, want_correct);
    }
  }
}

TEST_F(ModelTest, GradientsArriveLastLayerFirstBeforeEarlierOnesExist) {
  std::unique_ptr<Model> model = Make(
      "input 2x6x6; conv 3 3x3; relu; maxpool 2; flatten; dense 4; relu; "
      "dense 3",
      4);
  SetRandomWeights(*model, 1);
  const std::vector<float> images = ToFloat(ref::Uniform(4 * 72, 2));
  PS_ASSERT_OK(model->Forward(images, {0, 1, 2, 1}, 4).status());
  std::vector<int> order;
  std::vector<std::vector<float>> seen(model->spec().tensors.size());
  PS_ASSERT_OK(model->Backward([&](int id, absl::Span<const float> gradient) {
    order.push_back(id);
    EXPECT_EQ(gradient.size(), model->spec().tensors[id].num_elements());
    seen[id].assign(gradient.begin(), gradient.end());
    if (id > 0) {
      EXPECT_EQ(model->Gradient(id - 1).status().code(), kFailedPrecondition);
    }
    return absl::OkStatus();
  }));
  EXPECT_EQ(order, (std::vector<int>{5, 4, 3, 2, 1, 0}));
  for (int id = 0; id < 6; ++id) {
    PS_ASSERT_OK_AND_ASSIGN(absl::Span<const float> gradient,
                            model->Gradient(id));
    EXPECT_EQ(std::vector<float>(gradient.begin(), gradient.end()), seen[id]);
  }
}

TEST_F(ModelTest, AnErrorFromTheCallbackStopsBackward) {
  std::unique_ptr<Model> model = Make("5-4-3", 2);
  SetRandomWeights(*model, 1);
  PS_ASSERT_OK(
      model->Forward(ToFloat(ref::Uniform(10, 1)), {0, 2}, 2).status());
  std::vector<int> order;
  EXPECT_EQ(model->Backward([&](int id, absl::Span<const float>) {
    order.push_back(id);
    return id == 2 ? absl::UnavailableError("server gone") : absl::OkStatus();
  }),
            absl::UnavailableError("server gone"));
  EXPECT_EQ(order, (std::vector<int>{3, 2}));
  EXPECT_EQ(model->Gradient(1).status().code(), kFailedPrecondition);
}

TEST_F(ModelTest, TheCallbackMayNotRunOrChangeTheModel) {
  std::unique_ptr<Model> model = Make("5-4-3", 2);
  SetRandomWeights(*model, 1);
  const std::vector<float> images = ToFloat(ref::Uniform(10, 1));
  const std::vector<float> labels = {0, 2};
  PS_ASSERT_OK(model->Forward(images, labels, 2).status());
  std::vector<int> classes(2);
  PS_ASSERT_OK(model->Backward([&](int id, absl::Span<const float> g) {
    EXPECT_EQ(model->SetWeights(id, g).code(), kFailedPrecondition);
    EXPECT_EQ(model->Forward(images, labels, 2).status().code(),
              kFailedPrecondition);
    EXPECT_EQ(model->Evaluate(images, labels, 2).status().code(),
              kFailedPrecondition);
    EXPECT_EQ(model->Predict(images, absl::MakeSpan(classes)).code(),
              kFailedPrecondition);
    EXPECT_EQ(model->Backward(nullptr).code(), kFailedPrecondition);
    return absl::OkStatus();
  }));
  PS_ASSERT_OK(model->Backward(nullptr));  // Nothing was discarded.
}

TEST_F(ModelTest, DropoutOnlyWhileTrainingAndEvaluateAlwaysWithout) {
  const std::string net = "input 6; dense 8; relu; dropout 0.5; dense 3";
  std::unique_ptr<Model> model = Make(net, 5);
  SetRandomWeights(*model, 4);
  const std::vector<float> images = ToFloat(ref::Uniform(30, 5));
  const std::vector<float> labels = RandomLabels(5, 3, 6);
  EXPECT_TRUE(model->training());
  StepInfo step;
  step.step = 3;
  PS_ASSERT_OK_AND_ASSIGN(float trained,
                          model->Forward(images, labels, 5, step));
  PS_ASSERT_OK_AND_ASSIGN(float again, model->Forward(images, labels, 5, step));
  EXPECT_EQ(again, trained);  // The mask is a function of the step.
  step.step = 4;
  PS_ASSERT_OK_AND_ASSIGN(float next, model->Forward(images, labels, 5, step));
  EXPECT_NE(next, trained);

  model->SetTraining(false);
  EXPECT_FALSE(model->training());
  PS_ASSERT_OK_AND_ASSIGN(float evaluated,
                          model->Forward(images, labels, 5, step));
  // Without dropout the net is the same as one without the layer.
  std::unique_ptr<Model> plain = Make("input 6; dense 8; relu; dense 3", 5);
  SetRandomWeights(*plain, 4);
  PS_ASSERT_OK_AND_ASSIGN(float want, plain->Forward(images, labels, 5));
  EXPECT_EQ(evaluated, want);
  EXPECT_NE(evaluated, trained);

  // Evaluate and Predict ignore the mode, and agree with each other.
  model->SetTraining(true);
  std::vector<int> classes(5), plain_classes(5);
  PS_ASSERT_OK(model->Predict(images, absl::MakeSpan(classes)));
  PS_ASSERT_OK(plain->Predict(images, absl::MakeSpan(plain_classes)));
  EXPECT_EQ(classes, plain_classes);
  int64_t want_correct = 0;
  for (int i = 0; i < 5; ++i) want_correct += classes[i] == labels[i];
  PS_ASSERT_OK_AND_ASSIGN(int64_t correct, model->Evaluate(images, labels, 5));
  EXPECT_EQ(correct, want_correct);
  EXPECT_TRUE(model->training());
}

TEST_F(ModelTest, EvaluateAndPredictRunInChunksOfMaxBatch) {
  std::unique_ptr<Model> big = Make(
      "input 1x4x4; conv 2 3x3; flatten; "
      "dense 3",
      16);
  std::unique_ptr<Model> small = Make(
      "input 1x4x4; conv 2 3x3; flatten; "
      "dense 3",
      3);
  SetRandomWeights(*big, 2);
  SetRandomWeights(*small, 2);
  constexpr int kExamples = 11;  // 3 + 3 + 3 + 2.
  const std::vector<float> images = ToFloat(ref::Uniform(kExamples * 16, 3));
  const std::vector<float> labels = RandomLabels(kExamples, 3, 4);
  std::vector<int> want(kExamples), got(kExamples);
  PS_ASSERT_OK(big->Predict(images, absl::MakeSpan(want)));
  PS_ASSERT_OK(small->Predict(images, absl::MakeSpan(got)));
  EXPECT_EQ(got, want);
  PS_ASSERT_OK_AND_ASSIGN(int64_t correct,
                          small->Evaluate(images, labels, kExamples));
  int64_t want_correct = 0;
  for (int i = 0; i < kExamples; ++i) want_correct += want[i] == labels[i];
  EXPECT_EQ(correct, want_correct);
  PS_ASSERT_OK_AND_ASSIGN(correct, small->Evaluate({}, {}, 0));
  EXPECT_EQ(correct, 0);
  PS_ASSERT_OK(small->Predict({}, {}));
}

TEST_F(ModelTest, BackwardNeedsAForwardThatNothingHasDiscarded) {
  std::unique_ptr<Model> model = Make("5-4-3", 2);
  SetRandomWeights(*model, 1);
  const std::vector<float> images = ToFloat(ref::Uniform(10, 1));
  const std::vector<float> labels = {2, 0};
  EXPECT_EQ(model->Backward(nullptr).code(), kFailedPrecondition);
  EXPECT_EQ(model->Gradient(0).status().code(), kFailedPrecondition);
  PS_ASSERT_OK(model->Forward(images, labels, 2).status());
  PS_ASSERT_OK(model->Backward(nullptr));
  PS_ASSERT_OK(model->Backward(nullptr));  // Again: the same gradients.

  PS_ASSERT_OK(model->Evaluate(images, labels, 2).status());
  EXPECT_EQ(model->Backward(nullptr).code(), kFailedPrecondition);
  PS_ASSERT_OK(model->Forward(images, labels, 2).status());
  PS_ASSERT_OK(model->SetWeights(1, {0.5f, 0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(model->Backward(nullptr).code(), kFailedPrecondition);
  PS_ASSERT_OK(model->Forward(images, labels, 2).status());
  std::vector<int> out(2);
  PS_ASSERT_OK(model->Predict(images, absl::MakeSpan(out)));
  EXPECT_EQ(model->Backward(nullptr).code(), kFailedPrecondition);
  // A Forward rejected for its input changes nothing.
  PS_ASSERT_OK(model->Forward(images, labels, 2).status());
  EXPECT_EQ(model->Forward(images, {2, 3}, 2).status().code(), kInvalid);
  PS_ASSERT_OK(model->Backward(nullptr));
}

TEST_F(ModelTest, RejectsBadExamplesWeightsAndOptions) {
  std::unique_ptr<Model> model = Make("input 1x2x2; flatten; dense 3", 2);
  EXPECT_EQ(model->example_size(), 4);
  EXPECT_EQ(model->num_classes(), 3);
  EXPECT_EQ(model->max_batch(), 2);
  const std::vector<float> images = ToFloat(ref::Uniform(8, 1));
  const std::vector<float> labels = {2, 0};
  auto code = [&](const std::vector<float>& x, const std::vector<float>& y,
                  int batch) {
    return model->Forward(x, y, batch).status().code();
  };
  EXPECT_EQ(code({}, {}, 0), kInvalid);
  EXPECT_EQ(code(ToFloat(ref::Uniform(12, 1)), {0, 1, 2}, 3), kInvalid);
  EXPECT_EQ(code(ToFloat(ref::Uniform(7, 1)), labels, 2), kInvalid);
  EXPECT_EQ(code(images, {2}, 2), kInvalid);
  EXPECT_EQ(code(images, {-1, 0}, 2), kInvalid);
  EXPECT_EQ(code(images, {0.5f, 0}, 2), kInvalid);
  EXPECT_EQ(code(images, {kNaN, 0}, 2), kInvalid);
  std::vector<float> nan_pixel = images;
  nan_pixel[5] = kNaN;
  EXPECT_EQ(code(nan_pixel, labels, 2), kInvalid);
  EXPECT_EQ(model->Evaluate(nan_pixel, labels, 2).status().code(), kInvalid);
  EXPECT_EQ(model->Evaluate(images, labels, 3).status().code(), kInvalid);
  EXPECT_EQ(model->Evaluate(images, labels, -1).status().code(), kInvalid);
  std::vector<int> classes(3);
  EXPECT_EQ(model->Predict(images, absl::MakeSpan(classes)).code(), kInvalid);

  const std::vector<float> three(3, 0.25f);
  EXPECT_EQ(model->SetWeights(-1, three).code(), kInvalid);
  EXPECT_EQ(model->SetWeights(2, three).code(), kInvalid);
  EXPECT_EQ(model->SetWeights(1, std::vector<float>(4)).code(), kInvalid);
  EXPECT_EQ(model->SetWeights(0, three, 10).code(), kInvalid);
  EXPECT_EQ(model->SetWeights(0, three, -1).code(), kInvalid);
  EXPECT_EQ(model->SetWeights(1, {0.1f, kNaN, 0.3f}).code(), kInvalid);
  // Slices write only their elements.
  PS_ASSERT_OK(model->SetWeights(0, three, 9));
  PS_ASSERT_OK(model->SetWeights(0, {}, 12));

  ModelOptions options;
  options.max_batch = 0;
  const ModelDescription d = Describe("5-3");
  EXPECT_EQ(CreateModel(d, options, backend_.get()).status().code(), kInvalid);
  options.max_batch = (1 << 20) + 1;
  EXPECT_EQ(CreateModel(d, options, backend_.get()).status().code(), kInvalid);
  EXPECT_EQ(CreateModel(d, ModelOptions(), nullptr).status().code(), kInvalid);
}

TEST_F(ModelTest, WeightsStartAtZeroAndADivergedLossIsAnError) {
  std::unique_ptr<Model> model = Make("5-3", 1);
  const std::vector<float> x(5, 1.0f);
  PS_ASSERT_OK_AND_ASSIGN(float loss, model->Forward(x, {1}, 1));
  EXPECT_NEAR(loss, std::log(3.0), 1e-6);  // A uniform softmax.
  // Finite weights whose products overflow float: the logits become inf.
  PS_ASSERT_OK(model->SetWeights(0, std::vector<float>(15, 3e38f)));
  EXPECT_EQ(model->Forward(x, {1}, 1).status().code(), kFailedPrecondition);
  EXPECT_EQ(model->Backward(nullptr).code(), kFailedPrecondition);
}

// Ten classes of 28x28 images, each a bright square in its own place plus
// noise: what a working CNN separates in a few plain SGD steps.
TEST_F(ModelTest, CnnPresetLowersItsLossOnSyntheticImages) {
  constexpr int kExamples = 20;
  std::unique_ptr<Model> model = Make("cnn", kExamples, /*seed=*/3);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->example_size(), 784);
  const ModelSpec& spec = model->spec();
  std::vector<std::vector<float>> weights(spec.tensors.size());
  for (size_t id = 0; id < spec.tensors.size(); ++id) {
    weights[id].resize(spec.tensors[id].num_elements());
    InitializeSlice(spec, id, 0, absl::MakeSpan(weights[id]));
    PS_ASSERT_OK(model->SetWeights(id, weights[id]));
  }
  std::vector<float> images = ToFloat(ref::Uniform(kExamples * 784, 9, 0, 0.3));
  std::vector<float> labels;
  for (int i = 0; i < kExamples; ++i) {
    const int label = i % 10;
    labels.push_back(label);
    const int top = 3 + 14 * (label / 5), left = 2 + 5 * (label % 5);
    for (int r = top; r < top + 8; ++r) {
      for (int c = left; c < left + 4; ++c) images[i * 784 + r * 28 + c] += 1;
    }
  }
  auto evaluation_loss = [&]() {
    model->SetTraining(false);
    absl::StatusOr<float> loss = model->Forward(images, labels, kExamples);
    model->SetTraining(true);
    EXPECT_TRUE(loss.ok()) << loss.status();
    return loss.value_or(0);
  };
  const float before = evaluation_loss();
  for (int step = 0; step < 12; ++step) {
    StepInfo info;
    info.step = step;
    PS_ASSERT_OK(model->Forward(images, labels, kExamples, info).status());
    PS_ASSERT_OK(model->Backward(nullptr));
    for (size_t id = 0; id < weights.size(); ++id) {
      PS_ASSERT_OK_AND_ASSIGN(absl::Span<const float> g, model->Gradient(id));
      for (size_t i = 0; i < g.size(); ++i) weights[id][i] -= 0.1f * g[i];
      PS_ASSERT_OK(model->SetWeights(id, weights[id]));
    }
  }
  const float after = evaluation_loss();
  EXPECT_LT(after, 0.5f * before) << "before " << before;
  PS_ASSERT_OK_AND_ASSIGN(int64_t correct,
                          model->Evaluate(images, labels, kExamples));
  EXPECT_GE(correct, 15);
}

}  // namespace
}  // namespace ps::worker::nn
