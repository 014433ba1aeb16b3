#include "server/staging_pool.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace ps::server {
namespace {

TEST(StagingPoolTest, FreshBuffersAreSizedLikeTheSlices) {
  StagingPool pool({5, 0, 3}, 1);
  GradientBuffers b = pool.Acquire();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].size(), 5u);
  EXPECT_EQ(b[1].size(), 0u);
  EXPECT_EQ(b[2].size(), 3u);
}

TEST(StagingPoolTest, ReusesAReleasedBufferWithoutReallocating) {
  StagingPool pool({1000, 10}, 1);
  GradientBuffers b = pool.Acquire();
  const float* memory = b[0].data();
  b[0][999] = 4.0f;
  pool.Release(std::move(b));
  EXPECT_EQ(pool.idle(), 1);
  GradientBuffers again = pool.Acquire();
  EXPECT_EQ(pool.idle(), 0);
  EXPECT_EQ(again[0].data(), memory);
  EXPECT_EQ(again[0][999], 4.0f);  // Not cleared: callers overwrite.
}

TEST(StagingPoolTest, KeepsAtMostMaxIdleBuffers) {
  StagingPool pool({8}, 2);
  std::vector<GradientBuffers> taken;
  for (int i = 0; i < 4; ++i) taken.push_back(pool.Acquire());
  for (GradientBuffers& b : taken) pool.Release(std::move(b));
  EXPECT_EQ(pool.idle(), 2);
}

TEST(StagingPoolTest, DropsBuffersOfAnotherShape) {
  StagingPool pool({8, 4}, 3);
  pool.Release(GradientBuffers());  // What a moved-from push holds.
  pool.Release(GradientBuffers{std::vector<float>(8), std::vector<float>(3)});
  pool.Release(GradientBuffers{std::vector<float>(8)});
  EXPECT_EQ(pool.idle(), 0);
  pool.Release(GradientBuffers{std::vector<float>(8), std::vector<float>(4)});
  EXPECT_EQ(pool.idle(), 1);
}

}  // namespace
}  // namespace ps::server
