#include "worker/mlp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/initializer.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "kernels/backend_testing.h"
#include "kernels/cpu_backend.h"
#include "kernels/reference_ops.h"

namespace ps::worker {
namespace {

using ::ps::kernels::reference::RandomUniform;
using ::ps::kernels::testing::AllNear;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The model evaluated in double by the obvious loops, on parameters
// params[tensor_id] laid out as in MlpModelSpec.
struct ReferenceResult {
  double loss = 0;
  std::vector<double> logits;
  // Distance of the pre-activation closest to a ReLU kink: finite
  // differences are only valid when their step does not cross one.
  double closest_to_kink = std::numeric_limits<double>::infinity();
};

ReferenceResult ReferenceForward(const std::vector<int>& sizes,
                                 const std::vector<std::vector<double>>& params,
                                 const std::vector<float>& images,
                                 const std::vector<float>& labels, int batch) {
  ReferenceResult result;
  std::vector<double> x(images.begin(), images.end());
  const size_t layers = sizes.size() - 1;
  for (size_t l = 0; l < layers; ++l) {
    const int in = sizes[l], out = sizes[l + 1];
    const std::vector<double>& w = params[2 * l];
    const std::vector<double>& b = params[2 * l + 1];
    std::vector<double> y(static_cast<size_t>(batch) * out);
    for (int r = 0; r < batch; ++r) {
      for (int j = 0; j < out; ++j) {
        double s = b[j];
        for (int i = 0; i < in; ++i) s += x[r * in + i] * w[i * out + j];
        if (l + 1 < layers) {
          result.closest_to_kink =
              std::min(result.closest_to_kink, std::abs(s));
          s = std::max(s, 0.0);
        }
        y[r * out + j] = s;
      }
    }
    x = std::move(y);
  }
  const int classes = sizes.back();
  for (int r = 0; r < batch; ++r) {
    double max = x[r * classes];
    for (int c = 0; c < classes; ++c) max = std::max(max, x[r * classes + c]);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(x[r * classes + c] - max);
    result.loss +=
        max + std::log(sum) - x[r * classes + static_cast<int>(labels[r])];
  }
  result.loss /= batch;
  result.logits = std::move(x);
  return result;
}

std::vector<float> RandomLabels(int n, int classes, uint64_t seed) {
  std::vector<float> labels = RandomUniform(n, seed, 0, classes);
  for (float& l : labels) l = std::min<float>(std::floor(l), classes - 1);
  return labels;
}

class MlpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PS_ASSERT_OK_AND_ASSIGN(backend_, kernels::CreateCpuBackend());
  }

  // Random weights and biases (biases non-zero so their gradients matter),
  // set on `mlp` and returned in double for the reference.
  std::vector<std::vector<double>> SetRandomWeights(Mlp& mlp, uint64_t seed) {
    std::vector<std::vector<double>> params;
    for (int id = 0; id < mlp.num_tensors(); ++id) {
      const std::vector<float> values = RandomUniform(
          mlp.spec().tensors[id].num_elements(), seed * 100 + id, -0.8f, 0.8f);
      EXPECT_TRUE(mlp.SetWeights(id, values).ok());
      params.emplace_back(values.begin(), values.end());
    }
    return params;
  }

  std::unique_ptr<kernels::Backend> backend_;
};

TEST_F(MlpTest, GradientsMatchFiniteDifferencesOfAReferenceModel) {
  const std::vector<std::vector<int>> nets = {{5, 3}, {5, 4, 3}, {5, 4, 4, 3}};
  for (const std::vector<int>& sizes : nets) {
    PS_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<Mlp> mlp,
        Mlp::Create(MlpModelSpec(sizes), 4, backend_.get()));
    for (int batch : {1, 3, 4}) {
      for (uint64_t seed = 1; seed <= 3; ++seed) {
        SCOPED_TRACE(absl::StrCat("net of ", sizes.size() - 1,
                                  " layers, batch ", batch, ", seed ", seed));
        std::vector<std::vector<double>> params = SetRandomWeights(*mlp, seed);
        const std::vector<float> images =
            RandomUniform(batch * sizes[0], seed + 7, -1.0f, 1.0f);
        const std::vector<float> labels =
            RandomLabels(batch, sizes.back(), seed + 11);
        PS_ASSERT_OK_AND_ASSIGN(float loss,
                                mlp->ForwardBackward(images, labels, batch));
        const ReferenceResult base =
            ReferenceForward(sizes, params, images, labels, batch);
        EXPECT_NEAR(loss, base.loss, 1e-5 * base.loss);
        // Central differences in double: truncation error ~h^2, rounding
        // ~1e-16/h, both far below the float gradient's own ~1e-6 error.
        constexpr double kStep = 1e-5;
        ASSERT_GT(base.closest_to_kink, 100 * kStep) << "pick another seed";
        for (int id = 0; id < mlp->num_tensors(); ++id) {
          std::vector<float> gradient(params[id].size());
          PS_ASSERT_OK(mlp->GetGradient(id, absl::MakeSpan(gradient)));
          std::vector<float> numeric(params[id].size());
          for (size_t i = 0; i < params[id].size(); ++i) {
            const double saved = params[id][i];
            params[id][i] = saved + kStep;
            const double up =
                ReferenceForward(sizes, params, images, labels, batch).loss;
            params[id][i] = saved - kStep;
            const double down =
                ReferenceForward(sizes, params, images, labels, batch).loss;
            params[id][i] = saved;
            numeric[i] = static_cast<float>((up - down) / (2 * kStep));
          }
          EXPECT_TRUE(AllNear(gradient, numeric, 2e-5, 1e-3))
              << mlp->spec().tensors[id].name;
        }
      }
    }
  }
}

TEST_F(MlpTest, GradientsBecomeReadyLastLayerFirst) {
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Mlp> mlp,
      Mlp::Create(MlpModelSpec({5, 4, 3}), 3, backend_.get()));
  SetRandomWeights(*mlp, 1);
  const std::vector<float> images = RandomUniform(15, 2);
  const std::vector<float> labels = {0, 2, 1};
  std::vector<int> order;
  std::vector<std::vector<float>> seen(mlp->num_tensors());
  PS_ASSERT_OK(
      mlp->ForwardBackward(
             images, labels, 3,
             [&](int id) {
               order.push_back(id);
               seen[id].resize(mlp->spec().tensors[id].num_elements());
               EXPECT_TRUE(mlp->GetGradient(id, absl::MakeSpan(seen[id])).ok());
               // Earlier layers are not done yet.
               if (id > 0) {
                 std::vector<float> earlier(
                     mlp->spec().tensors[id - 1].num_elements());
                 EXPECT_EQ(
                     mlp->GetGradient(id - 1, absl::MakeSpan(earlier)).code(),
                     absl::StatusCode::kFailedPrecondition);
               }
             })
          .status());
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
  for (int id = 0; id < mlp->num_tensors(); ++id) {
    std::vector<float> final_values(seen[id].size());
    PS_ASSERT_OK(mlp->GetGradient(id, absl::MakeSpan(final_values)));
    EXPECT_TRUE(AllNear(seen[id], final_values, 0, 0));
  }
}

// Three well separated clusters in 4-d, one per class.
struct Blobs {
  std::vector<float> images;
  std::vector<float> labels;
};
Blobs MakeBlobs(int n) {
  Blobs blobs;
  const std::vector<float> noise = RandomUniform(n * 4, 99, -0.5f, 0.5f);
  for (int i = 0; i < n; ++i) {
    const int label = i % 3;
    for (int f = 0; f < 4; ++f) {
      blobs.images.push_back((f == label ? 2.0f : 0.0f) + noise[i * 4 + f]);
    }
    blobs.labels.push_back(label);
  }
  return blobs;
}

TEST_F(MlpTest, PlainSgdLowersTheLossAndLearnsSeparableClasses) {
  const ModelSpec spec = MlpModelSpec({4, 8, 3}, /*seed=*/3);
  constexpr int kExamples = 60;
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Mlp> mlp,
                          Mlp::Create(spec, kExamples, backend_.get()));
  std::vector<std::vector<float>> weights(spec.tensors.size());
  for (size_t id = 0; id < spec.tensors.size(); ++id) {
    weights[id].resize(spec.tensors[id].num_elements());
    InitializeSlice(spec, id, 0, absl::MakeSpan(weights[id]));
    PS_ASSERT_OK(mlp->SetWeights(id, weights[id]));
  }
  const Blobs blobs = MakeBlobs(kExamples);
  PS_ASSERT_OK_AND_ASSIGN(int correct_before,
                          mlp->Evaluate(blobs.images, blobs.labels, kExamples));
  std::vector<float> losses;
  for (int step = 0; step < 30; ++step) {
    PS_ASSERT_OK_AND_ASSIGN(
        float loss,
        mlp->ForwardBackward(blobs.images, blobs.labels, kExamples));
    losses.push_back(loss);
    for (size_t id = 0; id < spec.tensors.size(); ++id) {
      std::vector<float> gradient(weights[id].size());
      PS_ASSERT_OK(mlp->GetGradient(id, absl::MakeSpan(gradient)));
      for (size_t i = 0; i < gradient.size(); ++i) {
        weights[id][i] -= 0.5f * gradient[i];
      }
      PS_ASSERT_OK(mlp->SetWeights(id, weights[id]));
    }
  }
  EXPECT_LT(losses[1], losses[0]);
  EXPECT_LT(losses.back(), 0.25f * losses.front());
  PS_ASSERT_OK_AND_ASSIGN(int correct_after,
                          mlp->Evaluate(blobs.images, blobs.labels, kExamples));
  EXPECT_GE(correct_after, 57) << "was " << correct_before;
}

TEST_F(MlpTest, EvaluateCountsCorrectAcrossPartialBatches) {
  const std::vector<int> sizes = {5, 4, 3};
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Mlp> mlp,
                          Mlp::Create(MlpModelSpec(sizes), 4, backend_.get()));
  const std::vector<std::vector<double>> params = SetRandomWeights(*mlp, 5);
  constexpr int kExamples = 10;  // Batches of 4, 4 and 2.
  const std::vector<float> images = RandomUniform(kExamples * 5, 6);
  const std::vector<float> labels = RandomLabels(kExamples, 3, 7);
  const ReferenceResult reference =
      ReferenceForward(sizes, params, images, labels, kExamples);
  int want = 0;
  for (int r = 0; r < kExamples; ++r) {
    const auto row = reference.logits.begin() + r * 3;
    want += (std::max_element(row, row + 3) - row) == labels[r];
  }
  ASSERT_GT(want, 0);
  ASSERT_LT(want, kExamples);
  PS_ASSERT_OK_AND_ASSIGN(int correct,
                          mlp->Evaluate(images, labels, kExamples));
  EXPECT_EQ(correct, want);
  PS_ASSERT_OK_AND_ASSIGN(correct, mlp->Evaluate({}, {}, 0));
  EXPECT_EQ(correct, 0);
}

TEST_F(MlpTest, WeightsStartAtZeroAndCanBeSetInSlices) {
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Mlp> mlp,
      Mlp::Create(MlpModelSpec({5, 4, 3}), 2, backend_.get()));
  const std::vector<float> images = RandomUniform(10, 1);
  const std::vector<float> labels = {2, 0};
  PS_ASSERT_OK_AND_ASSIGN(float loss, mlp->ForwardBackward(images, labels, 2));
  EXPECT_NEAR(loss, std::log(3.0), 1e-6);  // Uniform softmax.

  SetRandomWeights(*mlp, 9);
  PS_ASSERT_OK_AND_ASSIGN(float whole, mlp->ForwardBackward(images, labels, 2));
  // The same weights again, tensor 0 written as three slices.
  const std::vector<float> w0 = RandomUniform(20, 900, -0.8f, 0.8f);
  PS_ASSERT_OK(mlp->SetWeights(0, std::vector<float>(20, 0.5f)));
  PS_ASSERT_OK(mlp->SetWeights(0, absl::MakeSpan(w0).subspan(0, 7), 0));
  PS_ASSERT_OK(mlp->SetWeights(0, absl::MakeSpan(w0).subspan(7, 12), 7));
  PS_ASSERT_OK(mlp->SetWeights(0, absl::MakeSpan(w0).subspan(19), 19));
  PS_ASSERT_OK_AND_ASSIGN(float sliced,
                          mlp->ForwardBackward(images, labels, 2));
  EXPECT_EQ(sliced, whole);
}

TEST_F(MlpTest, CreateRejectsSpecsThatAreNotAnMlp) {
  auto code = [&](const ModelSpec& spec, int max_batch = 8) {
    return Mlp::Create(spec, max_batch, backend_.get()).status().code();
  };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code(ModelSpec{}), kInvalid);
  ModelSpec odd = MlpModelSpec({5, 4, 3});
  odd.tensors.pop_back();
  EXPECT_EQ(code(odd), kInvalid);
  ModelSpec broken_chain = MlpModelSpec({5, 4, 3});
  broken_chain.tensors[2].shape = {3, 3};
  EXPECT_EQ(code(broken_chain), kInvalid);
  ModelSpec bad_bias = MlpModelSpec({5, 4, 3});
  bad_bias.tensors[1].shape = {5};
  EXPECT_EQ(code(bad_bias), kInvalid);
  ModelSpec swapped = MlpModelSpec({5, 4});
  std::swap(swapped.tensors[0], swapped.tensors[1]);
  EXPECT_EQ(code(swapped), kInvalid);
  ModelSpec three_d = MlpModelSpec({5, 4});
  three_d.tensors[0].shape = {5, 4, 1};
  EXPECT_EQ(code(three_d), kInvalid);
  EXPECT_EQ(code(MlpModelSpec({5, 4}), 0), kInvalid);
  EXPECT_EQ(code(MlpModelSpec({5, 4}), (1 << 20) + 1), kInvalid);
  EXPECT_EQ(Mlp::Create(MlpModelSpec({5, 4}), 8, nullptr).status().code(),
            kInvalid);
}

TEST_F(MlpTest, SetWeightsRejectsBadTensorsSlicesAndValuesWithoutWriting) {
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Mlp> mlp,
      Mlp::Create(MlpModelSpec({5, 4, 3}), 2, backend_.get()));
  SetRandomWeights(*mlp, 2);
  const std::vector<float> images = RandomUniform(10, 1);
  const std::vector<float> labels = {2, 0};
  PS_ASSERT_OK_AND_ASSIGN(float before,
                          mlp->ForwardBackward(images, labels, 2));
  const std::vector<float> four(4, 0.25f);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(mlp->SetWeights(-1, four).code(), kInvalid);
  EXPECT_EQ(mlp->SetWeights(4, four).code(), kInvalid);
  EXPECT_EQ(mlp->SetWeights(1, std::vector<float>(5, 0.25f)).code(), kInvalid);
  EXPECT_EQ(mlp->SetWeights(0, four, 17).code(), kInvalid);
  EXPECT_EQ(mlp->SetWeights(0, four, -1).code(), kInvalid);
  EXPECT_EQ(mlp->SetWeights(1, {0.1f, 0.2f, kNaN, 0.3f}).code(), kInvalid);
  EXPECT_EQ(
      mlp->SetWeights(1, {0.1f, std::numeric_limits<float>::infinity(), 0, 0})
          .code(),
      kInvalid);
  PS_ASSERT_OK_AND_ASSIGN(float after, mlp->ForwardBackward(images, labels, 2));
  EXPECT_EQ(after, before);
}

TEST_F(MlpTest, ForwardBackwardRejectsBadBatchesAndKeepsGradients) {
  PS_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Mlp> mlp,
      Mlp::Create(MlpModelSpec({5, 4, 3}), 2, backend_.get()));
  SetRandomWeights(*mlp, 3);
  const std::vector<float> images = RandomUniform(10, 1);
  const std::vector<float> labels = {2, 0};
  PS_ASSERT_OK(mlp->ForwardBackward(images, labels, 2).status());
  std::vector<float> gradient(20);
  PS_ASSERT_OK(mlp->GetGradient(0, absl::MakeSpan(gradient)));

  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  auto code = [&](const std::vector<float>& x, const std::vector<float>& y,
                  int batch) {
    return mlp->ForwardBackward(x, y, batch).status().code();
  };
  EXPECT_EQ(code({}, {}, 0), kInvalid);
  EXPECT_EQ(code(RandomUniform(15, 1), {0, 1, 2}, 3), kInvalid);  // > max.
  EXPECT_EQ(code(RandomUniform(9, 1), labels, 2), kInvalid);
  EXPECT_EQ(code(images, {2}, 2), kInvalid);
  EXPECT_EQ(code(images, {2, 3}, 2), kInvalid);
  EXPECT_EQ(code(images, {-1, 0}, 2), kInvalid);
  EXPECT_EQ(code(images, {0.5f, 0}, 2), kInvalid);
  EXPECT_EQ(code(images, {kNaN, 0}, 2), kInvalid);
  std::vector<float> nan_pixel = images;
  nan_pixel[7] = kNaN;
  EXPECT_EQ(code(nan_pixel, labels, 2), kInvalid);
  EXPECT_EQ(mlp->Evaluate(nan_pixel, labels, 2).status().code(), kInvalid);
  EXPECT_EQ(mlp->Evaluate(images, labels, 3).status().code(), kInvalid);

  std::vector<float> still(20);
  PS_ASSERT_OK(mlp->GetGradient(0, absl::MakeSpan(still)));
  EXPECT_TRUE(AllNear(still, gradient, 0, 0));
  EXPECT_EQ(mlp->GetGradient(0, absl::MakeSpan(still), 1).code(), kInvalid);
  EXPECT_EQ(mlp->GetGradient(4, absl::MakeSpan(still)).code(), kInvalid);
}

TEST_F(MlpTest, GetGradientBeforeAnyStepFails) {
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Mlp> mlp,
                          Mlp::Create(MlpModelSpec({5, 3}), 2, backend_.get()));
  std::vector<float> gradient(15);
  EXPECT_EQ(mlp->GetGradient(0, absl::MakeSpan(gradient)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(MlpTest, DivergedLossIsAnErrorWithoutGradients) {
  PS_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Mlp> mlp,
                          Mlp::Create(MlpModelSpec({5, 3}), 1, backend_.get()));
  // Finite weights whose products overflow float: logits become inf.
  PS_ASSERT_OK(mlp->SetWeights(0, std::vector<float>(15, 3e38f)));
  const absl::StatusOr<float> loss =
      mlp->ForwardBackward(std::vector<float>(5, 1.0f), {1}, 1);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kFailedPrecondition)
      << loss.status();
  std::vector<float> gradient(3);
  EXPECT_EQ(mlp->GetGradient(1, absl::MakeSpan(gradient)).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ps::worker
