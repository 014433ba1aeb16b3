#include "client/tensor_compression.h"

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
