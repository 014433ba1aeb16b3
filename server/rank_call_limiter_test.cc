#include "server/rank_call_limiter.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ps::server {
namespace {

TEST(RankCallLimiterTest, RefusesBeyondTheBoundPerRankAndFreesOnRelease) {
  RankCallLimiter limiter(/*num_workers=*/2, /*max_calls=*/2);
  std::vector<RankCallLimiter::Slot> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<RankCallLimiter::Slot> slot = limiter.Acquire(0);
    ASSERT_TRUE(slot.ok()) << slot.status();
    held.push_back(*std::move(slot));
  }
  const absl::Status refused = limiter.Acquire(0).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "worker 0 has 2 calls open on this server already; at most 2");
  // Another rank has its own bound.
  EXPECT_TRUE(limiter.Acquire(1).ok());
  held.pop_back();
  EXPECT_TRUE(limiter.Acquire(0).ok());
}

TEST(RankCallLimiterTest, ZeroMeansNoBound) {
  RankCallLimiter limiter(1, 0);
  std::vector<RankCallLimiter::Slot> held;
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<RankCallLimiter::Slot> slot = limiter.Acquire(0);
    ASSERT_TRUE(slot.ok());
    held.push_back(*std::move(slot));
  }
}

}  // namespace
}  // namespace ps::server
