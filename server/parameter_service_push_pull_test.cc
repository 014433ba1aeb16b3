// ParameterService's PushPull: a push, then the pull it stands for.
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/parameter_service_testing.h"

namespace ps::server::testing {
namespace {

TEST_F(ParameterServiceTest, PushPullAnswersWithTheWeightsAfterItsPush) {
  Start(ConsistencyMode::kAsync);
  for (uint64_t max_chunk : {0, 7}) {
    const uint64_t step = max_chunk == 0 ? 0 : 1;
    Weights weights;
    uint64_t version = 0;
    ASSERT_TRUE(
        PushPull(ValidPush(0, step, 1.0f), max_chunk, &weights, &version).ok());
    EXPECT_EQ(version, step + 1);
    const Weights initial = InitialWeights();
    ASSERT_EQ(weights.size(), initial.size());
    for (const auto& [key, w] : initial) {
      EXPECT_FLOAT_EQ(weights[key], w - (step + 1.0f))
          << "max_chunk " << max_chunk;
    }
  }
  const proto::StatsResponse stats = Stats();
  EXPECT_NE(stats.report().find("pushes: 2 ok, 0 refused"), std::string::npos)
      << stats.report();
  EXPECT_NE(stats.report().find("pulls: 2 ok, 0 refused"), std::string::npos)
      << stats.report();
}

TEST_F(ParameterServiceTest, SyncPushPullWaitsForEveryRankOfItsStep) {
  Start(ConsistencyMode::kSync);
  Weights weights;
  uint64_t version = 0;
  grpc::Status status;
  std::thread rank0(
      [&] { status = PushPull(ValidPush(0, 0, 1.0f), 0, &weights, &version); });
  // Rank 0's call waits for the step, which needs rank 1's push.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(coordinator_->version(), 0u);
  uint64_t pushed = 0;
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &pushed).ok());
  rank0.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(version, 1u);
  for (const auto& [key, w] : InitialWeights()) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);  // lr 1 * mean(1, 3)
  }
}

TEST_F(ParameterServiceTest, PushPullStandsForThePullItsWorkerMadeBefore) {
  // Rank 0's push for step 0 was lost here (say, in a restart of this
  // shard) and it took the weights for clock 1 with that call: its next
  // request is its push for step 1.
  Start(ConsistencyMode::kSync);
  uint64_t pushed = 0;
  ASSERT_TRUE(Push(ValidPush(1, 0, 3.0f), &pushed).ok());
  // A Push cannot say so: it is ahead. (Its cursor moves on from what this
  // shard took: only a restored shard takes a cursor further ahead.)
  EXPECT_EQ(Push(ValidPush(0, 1, 1.0f, /*batch=*/0), &pushed).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // A PushPull does: rank 0 takes part in step 0 with weight 0, then its
  // push for step 1 is taken and its pull waits for rank 1's.
  Weights weights;
  uint64_t version = 0;
  grpc::Status status;
  std::thread rank0([&] {
    status =
        PushPull(ValidPush(0, 1, 1.0f, /*batch=*/0), 0, &weights, &version);
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (coordinator_->version() < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(Push(ValidPush(1, 1, 5.0f), &pushed).ok());
  rank0.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(version, 2u);
  for (const auto& [key, w] : InitialWeights()) {
    // Step 0: rank 1's 3 alone; step 1: mean(1, 5).
    EXPECT_FLOAT_EQ(weights[key], w - 6.0f);
  }
}

TEST_F(ParameterServiceTest, PushPullWithARefusedPushPullsNothing) {
  Start(ConsistencyMode::kAsync);
  std::vector<proto::PushRequest> incomplete = ValidPush(0, 0, 1.0f);
  incomplete.pop_back();
  Weights weights;
  uint64_t version = 0;
  grpc::Status s = PushPull(incomplete, 0, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("push refused: push is incomplete"),
            std::string::npos)
      << s.error_message();
  EXPECT_TRUE(weights.empty());
  ASSERT_TRUE(Pull(0, 0, &weights, &version).ok());
  EXPECT_EQ(version, 0u);
  EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
}

}  // namespace
}  // namespace ps::server::testing
