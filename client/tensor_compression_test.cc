#include "client/tensor_compression.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::client_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SparsifyTopKTest, SendsTheLargestMagnitudesAndKeepsTheRest) {
  std::vector<float> residual;
  const std::vector<float> sent =
      SparsifyTopK({0.5f, -3.0f, 1.0f, 2.0f}, 0.5, &residual);
  EXPECT_THAT(sent, ElementsAre(0, -3.0f, 0, 2.0f));
  EXPECT_THAT(residual, ElementsAre(0.5f, 0, 1.0f, 0));
}

TEST(SparsifyTopKTest, AddsTheResidualFirst) {
  std::vector<float> residual = {0.5f, 0, 1.0f, 0};
  const std::vector<float> sent =
      SparsifyTopK({0.5f, 0.1f, 0.25f, 1.0f}, 0.25, &residual);
  // Sums 1.0, 0.1, 1.25, 1.0: the largest is 1.25.
  EXPECT_THAT(sent, ElementsAre(0, 0, 1.25f, 0));
  EXPECT_THAT(residual, ElementsAre(1.0f, 0.1f, 0, 1.0f));
}

TEST(SparsifyTopKTest, TiesGoToTheLowerIndexAndAtLeastOneIsSent) {
  std::vector<float> residual;
  EXPECT_THAT(SparsifyTopK({1.0f, -1.0f, 1.0f}, 0.01, &residual),
              ElementsAre(1.0f, 0, 0));
  EXPECT_THAT(residual, ElementsAre(0, -1.0f, 1.0f));
}

TEST(SparsifyTopKTest, NothingIsLostOverSteps) {
  // Every step's gradient is eventually sent: sent + residual always sums
  // to every gradient so far.
  std::vector<float> residual;
  std::vector<float> total_sent(5, 0), total_gradient(5, 0);
  for (int step = 0; step < 7; ++step) {
    std::vector<float> g = {0.1f * step, -0.2f, 0.3f, 0.05f, -1.0f + step};
    const std::vector<float> sent = SparsifyTopK(g, 0.4, &residual);
    for (int i = 0; i < 5; ++i) {
      total_sent[i] += sent[i];
      total_gradient[i] += g[i];
    }
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(total_sent[i] + residual[i], total_gradient[i], 1e-5) << i;
  }
}

// The definition: indices sorted by magnitude, larger first, ties to the
// lower index; the first k are sent.
std::vector<bool> TopKByDefinition(const std::vector<float>& sum, size_t k) {
  std::vector<size_t> order(sum.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&sum](size_t a, size_t b) {
    return std::fabs(sum[a]) > std::fabs(sum[b]);
  });
  std::vector<bool> chosen(sum.size(), false);
  for (size_t j = 0; j < k; ++j) chosen[order[j]] = true;
  return chosen;
}

// SparsifyTopK of `gradient` (no residual) sends exactly the definition's k
// sums and keeps the others, bit for bit.
void ExpectTopK(const std::vector<float>& gradient, double ratio) {
  const size_t n = gradient.size();
  const size_t k =
      std::max<size_t>(1, static_cast<size_t>(std::ceil(ratio * n)));
  const std::vector<bool> chosen = TopKByDefinition(gradient, k);
  std::vector<float> residual;
  const std::vector<float> sent = SparsifyTopK(gradient, ratio, &residual);
  ASSERT_EQ(sent.size(), n);
  ASSERT_EQ(residual.size(), n);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const float want_sent = chosen[i] ? gradient[i] : 0.0f;
    const float want_kept = chosen[i] ? 0.0f : gradient[i];
    if (sent[i] != want_sent || residual[i] != want_kept) ++wrong;
  }
  EXPECT_EQ(wrong, 0u) << "n " << n << ", ratio " << ratio;
}

TEST(SparsifyTopKTest, SendsExactlyTheTopKOfRandomGradients) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (size_t n : {1, 5, 100, 8191, 8193, 100000}) {
    std::vector<float> gradient(n);
    for (float& g : gradient) g = normal(random);
    for (double ratio : {0.001, 0.01, 0.1, 0.5, 1.0}) {
      ExpectTopK(gradient, ratio);
    }
  }
}

TEST(SparsifyTopKTest, SendsExactlyTheTopKWithManyTiesAndZeros) {
  // Mostly zeros (dead units), a few values repeated: the threshold falls
  // on a tie, which goes to the lower indices.
  std::mt19937 random(11);
  std::vector<float> gradient(50000, 0.0f);
  for (size_t i = 0; i < gradient.size(); i += 3) {
    gradient[i] = static_cast<float>(random() % 4) * 0.25f - 0.5f;
  }
  for (double ratio : {0.01, 0.2, 0.5, 0.9}) ExpectTopK(gradient, ratio);
}

TEST(SparsifyTopKTest, SendsExactlyTheTopKWhenTheSampleMisleads) {
  // Large values exactly where an evenly spaced sample looks, small ones
  // elsewhere: the sample's threshold is too high for k = n / 2, and the
  // selection has to look again.
  const size_t n = 4 * 8192;
  std::vector<float> gradient(n);
  for (size_t i = 0; i < n; ++i) {
    gradient[i] = i % 4 == 0 ? 1.0f + i * 1e-6f : 1e-3f + i * 1e-9f;
  }
  ExpectTopK(gradient, 0.5);
  // And sorted input, small to large or large to small.
  std::vector<float> rising(n), falling(n);
  for (size_t i = 0; i < n; ++i) {
    rising[i] = static_cast<float>(i);
    falling[i] = static_cast<float>(n - i);
  }
  ExpectTopK(rising, 0.01);
  ExpectTopK(falling, 0.01);
}

TEST(SparsifyTopKTest, SendsANanRatherThanKeepingIt) {
  std::vector<float> residual;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> sent =
      SparsifyTopK({1.0f, nan, -2.0f}, 0.3, &residual);
  EXPECT_TRUE(std::isnan(sent[1]));
  EXPECT_EQ(sent[0], 0.0f);
  EXPECT_EQ(sent[2], 0.0f);
  EXPECT_EQ(residual[1], 0.0f);
}

ModelSpec Model() {
  ModelSpec model;
  model.tensors.push_back({"w", DType::kFloat32, {4}});
  model.tensors.push_back({"b", DType::kFloat32, {2}});
  return model;
}

TEST(TensorCompressionTest, SetChangesOneTensor) {
  const ModelSpec model = Model();
  TensorCompression compression(&model, {Compression::Kind::kBfloat16});
  ASSERT_TRUE(compression.Set(1, {Compression::Kind::kTopK, 0.5}).ok());
  const std::vector<Compression> choices = compression.Choices();
  EXPECT_EQ(choices[0].kind, Compression::Kind::kBfloat16);
  EXPECT_EQ(choices[1].kind, Compression::Kind::kTopK);
  EXPECT_EQ(PushEncoding(choices[1]), WireEncoding::kTopK);
  EXPECT_EQ(PullEncoding(choices[1]), WireEncoding::kFloat32);
  EXPECT_EQ(PullEncoding(choices[0]), WireEncoding::kBfloat16);
}

TEST(TensorCompressionTest, RefusesUnknownTensorAndBadRatio) {
  const ModelSpec model = Model();
  TensorCompression compression(&model, {});
  EXPECT_THAT(compression.Set(2, {}).message(), HasSubstr("no tensor 2"));
  absl::Status s = compression.Set(0, {Compression::Kind::kTopK, 0});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("topk_ratio"));
  EXPECT_FALSE(compression.Set(0, {Compression::Kind::kTopK, 1.5}).ok());
}

TEST(TensorCompressionTest, ResidualIsKeptOnlyOnceCommitted) {
  const ModelSpec model = Model();
  TensorCompression compression(&model, {Compression::Kind::kTopK, 0.25});
  std::vector<float> residual;
  compression.Sparsify(0, {1, 2, 3, 4}, 0.25, &residual);
  // Not committed (the push failed): the same input sends the same.
  std::vector<float> again;
  EXPECT_THAT(compression.Sparsify(0, {1, 2, 3, 4}, 0.25, &again),
              ElementsAre(0, 0, 0, 4));
  compression.Commit(0, again);
  std::vector<float> next;
  EXPECT_THAT(compression.Sparsify(0, {0, 0, 0, 0}, 0.25, &next),
              ElementsAre(0, 0, 3, 0));
  // Leaving top-k drops the residual.
  ASSERT_TRUE(compression.Set(0, {}).ok());
  compression.Commit(0, next);
  ASSERT_TRUE(compression.Set(0, {Compression::Kind::kTopK, 0.25}).ok());
  EXPECT_THAT(compression.Sparsify(0, {0, 0, 0, 0}, 0.25, &next),
              ElementsAre(0, 0, 0, 0));
}

}  // namespace
}  // namespace ps::client_internal
