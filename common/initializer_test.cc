#include "common/initializer.h"

#include <cmath>
#include <vector>

#include "common/model_spec.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

TEST(InitializerTest, SliceValuesDoNotDependOnHowTheTensorIsSplit) {
  const ModelSpec model = MlpModelSpec({784, 256, 10});
  std::vector<float> whole(784 * 256);
  InitializeSlice(model, 0, 0, /*seed=*/7, absl::MakeSpan(whole));
  std::vector<float> tail(1000);
  InitializeSlice(model, 0, 5000, /*seed=*/7, absl::MakeSpan(tail));
  for (size_t i = 0; i < tail.size(); ++i) {
    ASSERT_EQ(tail[i], whole[5000 + i]);
  }
}

TEST(InitializerTest, WeightsAreGlorotUniformAndBiasesZero) {
  const ModelSpec model = MlpModelSpec({784, 256, 10});
  std::vector<float> w(784 * 256);
  InitializeSlice(model, 0, 0, 1, absl::MakeSpan(w));
  const float limit = std::sqrt(6.0f / (784 + 256));
  double sum = 0, sum_sq = 0;
  for (float v : w) {
    ASSERT_LE(std::abs(v), limit);
    sum += v;
    sum_sq += v * v;
  }
  const double mean = sum / w.size();
  const double var = sum_sq / w.size() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01 * limit);
  EXPECT_NEAR(var, limit * limit / 3.0, 0.02 * limit * limit);

  std::vector<float> b(256, 1.0f);
  InitializeSlice(model, 1, 0, 1, absl::MakeSpan(b));
  for (float v : b) EXPECT_EQ(v, 0.0f);
}

TEST(InitializerTest, SeedsAndTensorsGiveDifferentValues) {
  const ModelSpec model = MlpModelSpec({16, 16, 16});
  std::vector<float> a(256), b(256), c(256);
  InitializeSlice(model, 0, 0, 1, absl::MakeSpan(a));
  InitializeSlice(model, 0, 0, 2, absl::MakeSpan(b));
  InitializeSlice(model, 2, 0, 1, absl::MakeSpan(c));
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace ps
