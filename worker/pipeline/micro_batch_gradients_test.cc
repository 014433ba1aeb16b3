#include "worker/pipeline/micro_batch_gradients.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ps::worker::pipeline {
namespace {

// Values whose double sums round differently in different orders.
std::vector<std::vector<float>> Gradients(int m) {
  std::vector<std::vector<float>> g(m);
  for (int i = 0; i < m; ++i) {
    g[i] = {1e-9f * (i + 1) + 0.1f * i, 3.3f - i * 1.7f, 1e7f / (i + 3)};
  }
  return g;
}

std::vector<float> SumInOrder(const std::vector<int>& order,
                              const std::vector<double>& weights) {
  const std::vector<std::vector<float>> g = Gradients(weights.size());
  MicroBatchGradients sums;
  sums.Start(weights, 2);
  for (int i : order) {
    EXPECT_TRUE(sums.Add(i, 0, g[i]).ok());
    EXPECT_TRUE(sums.Add(i, 1, {float(i)}).ok());
  }
  std::vector<float> out;
  EXPECT_TRUE(sums.Sum(0, out).ok());
  return out;
}

TEST(MicroBatchGradientsTest, AnyArrivalOrderGivesTheSameBits) {
  for (int m : {2, 3, 5, 6}) {
    std::vector<double> weights(m);
    for (int i = 0; i < m; ++i) weights[i] = (i + 1.0) / (m * (m + 1) / 2);
    std::vector<int> order(m);
    std::iota(order.begin(), order.end(), 0);
    const std::vector<float> first = SumInOrder(order, weights);
    do {
      EXPECT_EQ(SumInOrder(order, weights), first) << m << " micro-batches";
    } while (std::next_permutation(order.begin(), order.end()));
  }
}

TEST(MicroBatchGradientsTest, SumsAlongTheTreeOfIndices) {
  // Three micro-batches: [0, 3) = [0, 1) + ([1, 2) + [2, 3)).
  const std::vector<double> w = {0.5, 0.25, 0.25};
  const std::vector<std::vector<float>> g = Gradients(3);
  MicroBatchGradients sums;
  sums.Start(w, 1);
  for (int i : {2, 0, 1}) ASSERT_TRUE(sums.Add(i, 0, g[i]).ok());
  std::vector<float> out;
  ASSERT_TRUE(sums.Sum(0, out).ok());
  for (size_t e = 0; e < out.size(); ++e) {
    const double want = w[0] * g[0][e] + (w[1] * g[1][e] + w[2] * g[2][e]);
    EXPECT_EQ(out[e], static_cast<float>(want)) << e;
  }
}

TEST(MicroBatchGradientsTest, OneMicroBatchIsItsGradientAndStepsStartAfresh) {
  MicroBatchGradients sums;
  const std::vector<float> g = {0.1f, -2.5f, 3e-8f};
  std::vector<float> out;
  for (int step = 0; step < 2; ++step) {
    sums.Start(std::vector<double>{1.0}, 1);
    EXPECT_EQ(sums.Sum(0, out).code(), absl::StatusCode::kFailedPrecondition);
    ASSERT_TRUE(sums.Add(0, 0, g).ok());
    ASSERT_TRUE(sums.Sum(0, out).ok());
    EXPECT_EQ(out, g);
  }
}

TEST(MicroBatchGradientsTest, RefusesRepeatsStrangersAndShapes) {
  MicroBatchGradients sums;
  sums.Start(std::vector<double>{0.5, 0.5}, 1);
  ASSERT_TRUE(sums.Add(0, 0, {1.0f, 2.0f}).ok());
  EXPECT_EQ(sums.Add(0, 0, {1.0f, 2.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sums.Add(2, 0, {1.0f, 2.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sums.Add(1, 1, {1.0f, 2.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sums.Add(1, 0, {1.0f}).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> out;
  EXPECT_EQ(sums.Sum(0, out).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(sums.Add(1, 0, {3.0f, 4.0f}).ok());
  // Once merged into its parent, micro-batch 0 is still known as added.
  EXPECT_EQ(sums.Add(0, 0, {1.0f, 2.0f}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(sums.Sum(0, out).ok());
  EXPECT_EQ(out, (std::vector<float>{2.0f, 3.0f}));
}

}  // namespace
}  // namespace ps::worker::pipeline
