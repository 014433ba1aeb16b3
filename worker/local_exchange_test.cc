#include "worker/local_exchange.h"

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

// Two tensors, 1.0 everywhere, trained by plain SGD at rate 0.5.
std::unique_ptr<LocalExchange> MakeExchange() {
  ModelSpec model;
  model.tensors.push_back(
      {"w", DType::kFloat32, {2, 3}, InitializerSpec::Constant(1)});
  model.tensors.push_back(
      {"b", DType::kFloat32, {3}, InitializerSpec::Constant(1)});
  absl::StatusOr<std::unique_ptr<LocalExchange>> exchange =
      LocalExchange::Create(model, OptimizerSpec::Sgd(0.5f), std::nullopt);
  EXPECT_TRUE(exchange.ok()) << exchange.status();
  (*exchange)->Declare(/*planned_steps=*/10);
  return *std::move(exchange);
}

StepInfo Step(uint64_t step) {
  StepInfo info;
  info.step = step;
  info.num_examples = 4;
  info.cursor = {0, 4 * (step + 1)};
  return info;
}

TEST(LocalExchangeTest, DeclaresOneSyncWorker) {
  std::unique_ptr<LocalExchange> exchange = MakeExchange();
  Registration registration = exchange->Declare(10);
  EXPECT_EQ(registration.mode, ConsistencyMode::kSync);
  EXPECT_EQ(registration.num_workers, 1);
  EXPECT_EQ(registration.next_step, 0u);
}

TEST(LocalExchangeTest, AStepPushAppliesEveryGradientWhenItFinishes) {
  std::unique_ptr<LocalExchange> exchange = MakeExchange();
  const std::vector<float> w_grad = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b_grad = {2, 0, -2};
  std::unique_ptr<StepPush> push = exchange->StartStep(Step(0), true);
  ASSERT_TRUE(push->Send(1, b_grad).ok());
  ASSERT_TRUE(push->Send(0, w_grad).ok());

  // Nothing is applied before the push finishes.
  TensorValues weights;
  absl::StatusOr<uint64_t> version = exchange->Pull(0, weights);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, 0u);
  EXPECT_EQ(weights[0], std::vector<float>(6, 1.0f));

  version = push->FinishWithPull(weights);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 1u);
  ASSERT_EQ(weights.size(), 2u);
  for (int i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(weights[0][i], 1 - 0.5f * w_grad[i]);
  for (int i = 0; i < 3; ++i)
    EXPECT_FLOAT_EQ(weights[1][i], 1 - 0.5f * b_grad[i]);

  // Finish without pull_after applies as well; a pull then sees it.
  push = exchange->StartStep(Step(1), false);
  ASSERT_TRUE(push->Send(0, w_grad).ok());
  ASSERT_TRUE(push->Send(1, b_grad).ok());
  ASSERT_TRUE(push->Finish().ok());
  version = exchange->Pull(2, weights);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, 2u);
  EXPECT_FLOAT_EQ(weights[1][0], 1 - 2 * 0.5f * b_grad[0]);
}

TEST(LocalExchangeTest, AnEmptyShareTakesItsStepAndChangesNothing) {
  std::unique_ptr<LocalExchange> exchange = MakeExchange();
  const std::vector<float> w_grad(6, 1.0f);
  const std::vector<float> b_grad(3, 1.0f);
  StepInfo info = Step(0);
  info.num_examples = 0;
  std::unique_ptr<StepPush> push = exchange->StartStep(info, true);
  ASSERT_TRUE(push->Send(0, w_grad).ok());
  ASSERT_TRUE(push->Send(1, b_grad).ok());
  TensorValues weights;
  absl::StatusOr<uint64_t> version = push->FinishWithPull(weights);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, 1u);
  EXPECT_EQ(weights[0], std::vector<float>(6, 1.0f));
}

// The StepPush contract of client/parameter_client.h.
TEST(LocalExchangeTest, SendRefusesWhatAStepPushRefuses) {
  std::unique_ptr<LocalExchange> exchange = MakeExchange();
  const std::vector<float> w_grad(6, 1.0f);
  const std::vector<float> short_grad(2, 1.0f);
  std::unique_ptr<StepPush> push = exchange->StartStep(Step(0), false);
  EXPECT_EQ(push->Send(2, w_grad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(push->Send(-1, w_grad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(push->Send(1, short_grad).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(push->Send(0, w_grad).ok());
  EXPECT_EQ(push->Send(0, w_grad).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LocalExchangeTest, APushMissingATensorAppliesNothing) {
  std::unique_ptr<LocalExchange> exchange = MakeExchange();
  const std::vector<float> w_grad(6, 1.0f);
  std::unique_ptr<StepPush> push = exchange->StartStep(Step(0), true);
  ASSERT_TRUE(push->Send(0, w_grad).ok());
  TensorValues weights;
  EXPECT_EQ(push->FinishWithPull(weights).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<uint64_t> version = exchange->Pull(0, weights);
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(*version, 0u);
  EXPECT_EQ(weights[0], std::vector<float>(6, 1.0f));
}

TEST(LocalExchangeTest, RestoredSnapshotContinuesWhereItWasTaken) {
  std::unique_ptr<LocalExchange> exchange = MakeExchange();
  const std::vector<float> w_grad = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b_grad = {2, 0, -2};
  auto step = [&](LocalExchange& e, uint64_t clock) {
    std::unique_ptr<StepPush> push = e.StartStep(Step(clock), false);
    ASSERT_TRUE(push->Send(0, w_grad).ok());
    ASSERT_TRUE(push->Send(1, b_grad).ok());
    ASSERT_TRUE(push->Finish().ok());
  };
  step(*exchange, 0);
  const std::vector<update::SliceSnapshot> snapshot = exchange->Snapshot();
  ASSERT_EQ(exchange->version(), 1u);
  step(*exchange, 1);

  std::unique_ptr<LocalExchange> restored = MakeExchange();
  ASSERT_TRUE(restored->Restore(snapshot, 1).ok());
  EXPECT_EQ(restored->version(), 1u);
  step(*restored, 1);
  TensorValues a, b;
  ASSERT_EQ(*exchange->Pull(0, a), 2u);
  ASSERT_EQ(*restored->Pull(0, b), 2u);
  EXPECT_EQ(a, b);
  // A snapshot of another layout changes nothing.
  std::vector<update::SliceSnapshot> wrong = snapshot;
  wrong.front().weights.pop_back();
  EXPECT_FALSE(restored->Restore(wrong, 7).ok());
  EXPECT_EQ(restored->version(), 2u);
}

}  // namespace
}  // namespace ps::worker
