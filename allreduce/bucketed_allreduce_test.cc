#include "allreduce/bucketed_allreduce.h"

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "allreduce/compression.h"
#include "allreduce/ring_testing.h"
#include "gtest/gtest.h"

namespace ps::allreduce {
namespace {

TEST(BucketPlanTest, PacksTensorsFromTheLastOne) {
  const BucketPlan plan = BucketPlan::Make({4, 4, 4, 10}, 8);
  // The 10-element tensor alone, then two of 4 together, then the first.
  EXPECT_EQ(plan.bucket_sizes, (std::vector<size_t>{10, 8, 4}));
  EXPECT_EQ(plan.tensors_in_bucket, (std::vector<int>{1, 2, 1}));
  EXPECT_EQ(plan.places[3].bucket, 0);
  EXPECT_EQ(plan.places[2].bucket, 1);
  EXPECT_EQ(plan.places[2].offset, 0);
  EXPECT_EQ(plan.places[1].bucket, 1);
  EXPECT_EQ(plan.places[1].offset, 4);
  EXPECT_EQ(plan.places[0].bucket, 2);
}

TEST(BucketPlanTest, ExactTensorsGetBucketsOfTheirOwn) {
  const BucketPlan plan = BucketPlan::Make({4, 4, 4, 2}, 100, {3});
  EXPECT_EQ(plan.bucket_sizes, (std::vector<size_t>{2, 12}));
  EXPECT_EQ(plan.exact_bucket, (std::vector<bool>{true, false}));
  const BucketPlan middle = BucketPlan::Make({4, 4, 4}, 100, {1});
  EXPECT_EQ(middle.bucket_sizes, (std::vector<size_t>{4, 4, 4}));
  EXPECT_EQ(middle.exact_bucket, (std::vector<bool>{false, true, false}));
}

TEST(BucketPlanTest, OneBucketWhenEverythingFits) {
  const BucketPlan plan = BucketPlan::Make({3, 5, 1}, 100);
  EXPECT_EQ(plan.bucket_sizes, (std::vector<size_t>{9}));
}

// Rank r adds tensor t as (r + 1) * (t + i) scaled by r + 1, in backward
// order on even ranks and forward order on odd ones; every step's sums must
// be right whatever the order.
TEST(BucketedAllreduceTest, SumsScaledTensorsOverTheRanksStepAfterStep) {
  constexpr int kRanks = 3;
  const std::vector<size_t> sizes = {300, 20, 5000, 7, 1};
  RunRingInThreads(kRanks, [&](GlooGroup& group) {
    absl::StatusOr<std::unique_ptr<BucketedAllreduce>> made =
        BucketedAllreduce::Create(&group, sizes, 4096);
    ASSERT_TRUE(made.ok()) << made.status();
    BucketedAllreduce& reduce = **made;
    ASSERT_GT(reduce.plan().bucket_sizes.size(), 1);
    const int r = group.rank();
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE(reduce.Begin().ok());
      std::vector<std::vector<float>> values(sizes.size());
      for (size_t t = 0; t < sizes.size(); ++t) {
        values[t].resize(sizes[t]);
        for (size_t i = 0; i < sizes[t]; ++i) values[t][i] = t + i + step;
      }
      for (size_t k = 0; k < sizes.size(); ++k) {
        const int t = r % 2 == 0 ? sizes.size() - 1 - k : k;
        ASSERT_TRUE(reduce.Add(t, values[t], r + 1.0f).ok());
      }
      ASSERT_TRUE(reduce.Wait().ok());
      for (size_t t = 0; t < sizes.size(); ++t) {
        absl::Span<const float> sum = reduce.Reduced(t);
        ASSERT_EQ(sum.size(), sizes[t]);
        for (size_t i = 0; i < sizes[t]; ++i) {
          // (1 + 2 + 3) (t + i + step): exact in float.
          ASSERT_EQ(sum[i], 6.0f * (t + i + step)) << t << " " << i;
        }
      }
    }
  });
}

// With fp16, the exact tensor (counts past 2^11, which binary16 would round)
// comes back exact; the others are the rounded values' sum.
TEST(BucketedAllreduceTest, Fp16CompressesAllButTheExactTensors) {
  constexpr int kRanks = 2;
  const std::vector<size_t> sizes = {100, 3};
  RunRingInThreads(kRanks, [&](GlooGroup& group) {
    absl::StatusOr<std::unique_ptr<BucketedAllreduce>> made =
        BucketedAllreduce::Create(&group, sizes, 4096, Compression::kFp16, {1});
    ASSERT_TRUE(made.ok()) << made.status();
    BucketedAllreduce& reduce = **made;
    ASSERT_TRUE(reduce.Begin().ok());
    const std::vector<float> counts = {60001, 4097, 1};
    ASSERT_TRUE(reduce.Add(1, counts, 1.0f).ok());
    std::vector<float> values(100);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0f + i * 0x1p-12f;
    ASSERT_TRUE(reduce.Add(0, values, 1.0f).ok());
    ASSERT_TRUE(reduce.Wait().ok());
    EXPECT_EQ(reduce.Reduced(1)[0], 120002.0f);
    EXPECT_EQ(reduce.Reduced(1)[1], 8194.0f);
    bool rounded = false;
    for (size_t i = 0; i < values.size(); ++i) {
      const float half = HalfToFloat(FloatToHalf(values[i]));
      // Two equal halves: their sum is exact (below 2^11 * ulp).
      ASSERT_EQ(reduce.Reduced(0)[i], 2 * half) << i;
      rounded = rounded || half != values[i];
    }
    EXPECT_TRUE(rounded);
  });
}

TEST(BucketedAllreduceTest, RejectsExactTensorsThatDoNotExist) {
  RunRingInThreads(1, [&](GlooGroup& group) {
    EXPECT_TRUE(absl::IsInvalidArgument(
        BucketedAllreduce::Create(&group, {2, 3}, 1024, Compression::kFp16, {2})
            .status()));
  });
}

TEST(BucketedAllreduceTest, RejectsWrongSizesAndTensorsAddedTwice) {
  RunRingInThreads(1, [&](GlooGroup& group) {
    absl::StatusOr<std::unique_ptr<BucketedAllreduce>> made =
        BucketedAllreduce::Create(&group, {2, 3}, 1024);
    ASSERT_TRUE(made.ok());
    BucketedAllreduce& reduce = **made;
    const std::vector<float> two = {1, 2};
    EXPECT_TRUE(absl::IsFailedPrecondition(reduce.Add(0, two, 1)))
        << "added before Begin";
    ASSERT_TRUE(reduce.Begin().ok());
    EXPECT_TRUE(absl::IsInvalidArgument(reduce.Add(1, two, 1)));
    EXPECT_TRUE(absl::IsInvalidArgument(reduce.Add(2, two, 1)));
    ASSERT_TRUE(reduce.Add(0, two, 1).ok());
    EXPECT_TRUE(absl::IsInvalidArgument(reduce.Add(0, two, 1)));
  });
}

TEST(BucketedAllreduceTest, AStepWithoutEveryTensorFailsAndEndsTheRing) {
  RunRingInThreads(1, [&](GlooGroup& group) {
    absl::StatusOr<std::unique_ptr<BucketedAllreduce>> made =
        BucketedAllreduce::Create(&group, {2, 3}, 4);
    ASSERT_TRUE(made.ok());
    BucketedAllreduce& reduce = **made;
    ASSERT_TRUE(reduce.Begin().ok());
    ASSERT_TRUE(reduce.Add(1, std::vector<float>{1, 2, 3}, 1).ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(reduce.Wait()));
    EXPECT_FALSE(reduce.Begin().ok());
  });
}

}  // namespace
}  // namespace ps::allreduce
