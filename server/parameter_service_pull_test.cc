// ParameterService's Pull: chunks, waits for the clock and for the others.
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "server/parameter_service_testing.h"

namespace ps::server::testing {
namespace {

TEST_F(ParameterServiceTest, PullStreamsEveryOwnedElementInBoundedChunks) {
  Start(ConsistencyMode::kSync);
  for (uint64_t max_chunk : {0, 7, 1000}) {
    Weights weights;
    uint64_t version = 99;
    ASSERT_TRUE(Pull(0, max_chunk, &weights, &version).ok());
    EXPECT_EQ(version, 0u);
    EXPECT_EQ(weights, InitialWeights()) << "max_chunk " << max_chunk;
  }
}

TEST_F(ParameterServiceTest, RefusesChunksBelowTheMinimum) {
  min_chunk_elements_ = 16;
  Start(ConsistencyMode::kAsync);
  Weights weights;
  uint64_t version = 0;
  grpc::Status s = Pull(0, 7, &weights, &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find(
                "max_chunk_elements 7 is below this server's minimum of 16"),
            std::string::npos)
      << s.error_message();
  // A push in chunks of 10 (slices hold more than 16 elements): refused.
  s = Push(ValidPush(0, 0, 1.0f), &version);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("chunks hold at least 16"),
            std::string::npos)
      << s.error_message();
  ASSERT_TRUE(Pull(0, 16, &weights, &version).ok());
  EXPECT_EQ(weights, InitialWeights()) << "a refused push changed weights";
}

TEST_F(ParameterServiceTest, SyncPullForAFutureClockWaits) {
  Start(ConsistencyMode::kSync);
  Weights weights;
  uint64_t version = 0;
  grpc::Status s = Pull(1, 0, &weights, &version, absl::Milliseconds(300));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(weights.empty());
}

TEST_F(ParameterServiceTest, FinalPullAnswersOnceTheOtherRanksAreDone) {
  Start(ConsistencyMode::kAsync);
  grpc::Status status;
  Weights weights;
  uint64_t version = 0;
  absl::Notification answered;
  std::thread rank0([&] {
    proto::PullRequest request;
    *request.mutable_header() = Header(0);
    request.set_after_others_finish(true);
    status = SendPull(request, &weights, &version);
    answered.Notify();
  });
  // Rank 1's last step comes after rank 0 asked, and is in the answer.
  EXPECT_FALSE(
      answered.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  uint64_t pushed = 0;
  ASSERT_TRUE(Push(ValidPush(1, 0, 2.0f), &pushed).ok());
  EXPECT_FALSE(
      answered.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  Register(1, 11);
  ASSERT_TRUE(Done(1, 11).ok());
  rank0.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(version, 1u);
  for (const auto& [key, w] : InitialWeights()) {
    EXPECT_FLOAT_EQ(weights[key], w - 2.0f);
  }
}

}  // namespace
}  // namespace ps::server::testing
