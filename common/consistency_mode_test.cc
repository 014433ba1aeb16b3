#include "common/consistency_mode.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

TEST(ConsistencyModeTest, NamesRoundTrip) {
  for (ConsistencyMode mode : {ConsistencyMode::kSync, ConsistencyMode::kSsp,
                               ConsistencyMode::kAsync}) {
    absl::StatusOr<ConsistencyMode> parsed =
        ParseConsistencyMode(ConsistencyModeName(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, mode);
  }
  EXPECT_FALSE(ParseConsistencyMode("bsp").ok());
}

TEST(ConsistencyModeTest, SspNeedsAStalenessAndOnlySspTakesOne) {
  EXPECT_TRUE(CheckStaleness(ConsistencyMode::kSsp, 2).ok());
  EXPECT_TRUE(CheckStaleness(ConsistencyMode::kSsp, kMaxStaleness).ok());
  EXPECT_TRUE(CheckStaleness(ConsistencyMode::kSync, 0).ok());
  EXPECT_TRUE(CheckStaleness(ConsistencyMode::kAsync, 0).ok());
  EXPECT_THAT(CheckStaleness(ConsistencyMode::kSsp, 0).message(),
              HasSubstr("--mode=ssp needs --staleness=N"));
  EXPECT_THAT(CheckStaleness(ConsistencyMode::kSync, 3).message(),
              HasSubstr("--staleness applies only to --mode=ssp, not "
                        "--mode=sync"));
  EXPECT_THAT(CheckStaleness(ConsistencyMode::kAsync, 1).message(),
              HasSubstr("not --mode=async"));
  EXPECT_THAT(CheckStaleness(ConsistencyMode::kSsp, -1).message(),
              HasSubstr("--staleness must be in [0, 1000000], got -1"));
  EXPECT_EQ(CheckStaleness(ConsistencyMode::kSsp, kMaxStaleness + 1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConsistencyModeTest, SyncJoinsTheServersStepOthersKeepTheirClock) {
  // Behind the servers (restarted, or the others finished a step without
  // this worker): sync catches up, ssp and async do not.
  EXPECT_EQ(NextPushClock(ConsistencyMode::kSync, 3, 7), 7u);
  EXPECT_EQ(NextPushClock(ConsistencyMode::kSsp, 3, 7), 3u);
  EXPECT_EQ(NextPushClock(ConsistencyMode::kAsync, 3, 7), 3u);
  // Weights older than the clock never move it back.
  EXPECT_EQ(NextPushClock(ConsistencyMode::kSync, 5, 4), 5u);
}

}  // namespace
}  // namespace ps
