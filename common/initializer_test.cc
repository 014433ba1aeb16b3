#include "common/initializer.h"

#include <cmath>
#include <vector>

#include "common/model_spec.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

// Mean and variance of `v`.
std::pair<double, double> Moments(const std::vector<float>& v) {
  double sum = 0, sum_sq = 0;
  for (float x : v) {
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double mean = sum / v.size();
  return {mean, sum_sq / v.size() - mean * mean};
}

ModelSpec OneTensor(std::vector<int64_t> shape, InitializerSpec init) {
  ModelSpec model;
  model.tensors.push_back({"t", DType::kFloat32, std::move(shape), init});
  return model;
}

TEST(InitializerTest, SliceValuesDoNotDependOnHowTheTensorIsSplit) {
  for (const InitializerSpec& init :
       {InitializerSpec::GlorotUniform(784, 256),
        InitializerSpec::Uniform(-2, 3), InitializerSpec::Normal(1, 0.5)}) {
    ModelSpec model = OneTensor({784, 256}, init);
    model.seed = 7;
    std::vector<float> whole(784 * 256);
    InitializeSlice(model, 0, 0, absl::MakeSpan(whole));
    std::vector<float> tail(1000);
    InitializeSlice(model, 0, 5000, absl::MakeSpan(tail));
    for (size_t i = 0; i < tail.size(); ++i) {
      ASSERT_EQ(tail[i], whole[5000 + i]) << InitializerKindName(init.kind);
    }
  }
}

TEST(InitializerTest, MlpWeightsAreGlorotUniformAndBiasesZero) {
  const ModelSpec model = MlpModelSpec({784, 256, 10});
  std::vector<float> w(784 * 256);
  InitializeSlice(model, 0, 0, absl::MakeSpan(w));
  const float limit = std::sqrt(6.0f / (784 + 256));
  for (float v : w) ASSERT_LE(std::abs(v), limit);
  const auto [mean, var] = Moments(w);
  // Tolerances: several standard errors of the sample moments of 200704
  // draws, so a correct generator passes with any seed.
  EXPECT_NEAR(mean, 0.0, 0.01 * limit);
  EXPECT_NEAR(var, limit * limit / 3.0, 0.02 * limit * limit);

  std::vector<float> b(256, 1.0f);
  InitializeSlice(model, 1, 0, absl::MakeSpan(b));
  for (float v : b) EXPECT_EQ(v, 0.0f);
}

TEST(InitializerTest, UniformStaysInItsRange) {
  const ModelSpec model = OneTensor({100000}, InitializerSpec::Uniform(2, 6));
  std::vector<float> v(100000);
  InitializeSlice(model, 0, 0, absl::MakeSpan(v));
  for (float x : v) {
    ASSERT_GE(x, 2.0f);
    ASSERT_LT(x, 6.0f);
  }
  const auto [mean, var] = Moments(v);
  EXPECT_NEAR(mean, 4.0, 0.02);
  EXPECT_NEAR(var, 16.0 / 12.0, 0.03);
}

TEST(InitializerTest, NormalHasItsMoments) {
  const ModelSpec model = OneTensor({100000}, InitializerSpec::Normal(-1, 2));
  std::vector<float> v(100000);
  InitializeSlice(model, 0, 0, absl::MakeSpan(v));
  for (float x : v) ASSERT_TRUE(std::isfinite(x));
  const auto [mean, var] = Moments(v);
  // Standard errors: 2 / sqrt(1e5) = 0.0063 for the mean, about 4 *
  // sqrt(2 / 1e5) = 0.018 for the variance.
  EXPECT_NEAR(mean, -1.0, 0.04);
  EXPECT_NEAR(var, 4.0, 0.1);
}

TEST(InitializerTest, ConstantZerosAndFromRank0) {
  std::vector<float> v(5, 9.0f);
  InitializeSlice(OneTensor({5}, InitializerSpec::Constant(0.25)), 0, 0,
                  absl::MakeSpan(v));
  EXPECT_EQ(v, std::vector<float>(5, 0.25f));
  InitializeSlice(OneTensor({5}, InitializerSpec::FromRank0()), 0, 0,
                  absl::MakeSpan(v));
  EXPECT_EQ(v, std::vector<float>(5, 0.0f));
  v.assign(1, 3.0f);
  InitializeSlice(OneTensor({}, InitializerSpec::Zeros()), 0, 0,
                  absl::MakeSpan(v));
  EXPECT_EQ(v[0], 0.0f);
}

TEST(InitializerTest, SeedsAndTensorsGiveDifferentValues) {
  ModelSpec model = MlpModelSpec({16, 16, 16});
  std::vector<float> a(256), b(256), c(256);
  InitializeSlice(model, 0, 0, absl::MakeSpan(a));
  InitializeSlice(model, 2, 0, absl::MakeSpan(c));
  model.seed = 2;
  InitializeSlice(model, 0, 0, absl::MakeSpan(b));
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace ps
