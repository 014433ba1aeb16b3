#include "worker/dataset.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

EpochSharder MakeSharder(uint64_t n, uint32_t m, uint32_t b,
                         uint64_t seed = 7) {
  absl::StatusOr<EpochSharder> sharder = EpochSharder::Create(n, m, b, seed);
  EXPECT_TRUE(sharder.ok()) << sharder.status();
  return *sharder;
}

std::vector<uint32_t> Indices(const EpochSharder& sharder, uint64_t epoch,
                              uint64_t step, uint32_t rank) {
  absl::StatusOr<std::vector<uint32_t>> indices =
      sharder.BatchIndices(epoch, step, rank);
  EXPECT_TRUE(indices.ok()) << indices.status();
  return indices.ok() ? *indices : std::vector<uint32_t>{};
}

TEST(EpochSharderTest, RejectsInvalidConfiguration) {
  EXPECT_EQ(EpochSharder::Create(0, 1, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EpochSharder::Create(uint64_t{1} << 32, 1, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status workers = EpochSharder::Create(10, 0, 1, 0).status();
  EXPECT_EQ(workers.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(workers.message(), HasSubstr("workers"));
  absl::Status batch = EpochSharder::Create(10, 1, 0, 0).status();
  EXPECT_EQ(batch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(batch.message(), HasSubstr("batch size"));
}

TEST(EpochSharderTest, StepsPerEpochRoundsUp) {
  EXPECT_EQ(MakeSharder(60000, 1, 64).steps_per_epoch(), 938u);
  EXPECT_EQ(MakeSharder(60000, 4, 25).steps_per_epoch(), 600u);
  EXPECT_EQ(MakeSharder(10, 4, 2).steps_per_epoch(), 2u);
  EXPECT_EQ(MakeSharder(3, 8, 100).steps_per_epoch(), 1u);
}

TEST(EpochSharderTest, PermutationIsAPermutation) {
  EpochSharder sharder = MakeSharder(1000, 1, 1);
  std::vector<uint32_t> order = sharder.Permutation(3);
  std::vector<uint32_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_NE(order, identity);
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, identity);
}

// The order must not depend on the compiler or standard library: it is
// pinned here (values cross-checked against an independent Python
// transcription of SplitMix64 + Lemire + Fisher-Yates), and changing it
// changes every training run.
TEST(EpochSharderTest, PermutationIsPinned) {
  EXPECT_THAT(MakeSharder(10, 1, 1, /*seed=*/42).Permutation(0),
              ElementsAre(5, 1, 9, 6, 7, 2, 4, 0, 8, 3));
  EXPECT_THAT(MakeSharder(10, 1, 1, /*seed=*/42).Permutation(1),
              ElementsAre(8, 9, 1, 7, 6, 4, 3, 2, 0, 5));
}

TEST(EpochSharderTest, SameSeedAndEpochGiveSameOrder) {
  EXPECT_EQ(MakeSharder(500, 2, 8, 11).Permutation(4),
            MakeSharder(500, 5, 3, 11).Permutation(4));
}

TEST(EpochSharderTest, DifferentEpochsAndSeedsGiveDifferentOrders) {
  EpochSharder sharder = MakeSharder(500, 2, 8, 11);
  std::set<std::vector<uint32_t>> orders;
  for (uint64_t epoch = 0; epoch < 20; ++epoch) {
    orders.insert(sharder.Permutation(epoch));
  }
  for (uint64_t seed = 100; seed < 120; ++seed) {
    orders.insert(MakeSharder(500, 2, 8, seed).Permutation(0));
  }
  EXPECT_EQ(orders.size(), 40u);
}

// Every example lands at every position equally often: catches an
// off-by-one in the shuffle (which would, e.g., never leave one in place).
TEST(EpochSharderTest, PermutationIsUniform) {
  constexpr int kEpochs = 2400;
  EpochSharder sharder = MakeSharder(4, 1, 1, 5);
  int counts[4][4] = {};
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    std::vector<uint32_t> order = sharder.Permutation(epoch);
    for (int pos = 0; pos < 4; ++pos) ++counts[pos][order[pos]];
  }
  for (int pos = 0; pos < 4; ++pos) {
    for (int value = 0; value < 4; ++value) {
      // Expected 600, standard deviation about 21.
      EXPECT_NEAR(counts[pos][value], kEpochs / 4, 100)
          << "position " << pos << " value " << value;
    }
  }
}

TEST(EpochSharderTest, ShardsAreDisjointAndCoverTheEpoch) {
  const std::vector<std::tuple<uint64_t, uint32_t, uint32_t>> configs = {
      {10, 1, 3}, {10, 3, 2}, {100, 4, 8}, {7, 3, 5},      {1, 2, 1},
      {13, 5, 1}, {10, 4, 2}, {64, 4, 16}, {60000, 3, 64}, {1001, 7, 9},
  };
  for (const auto& [n, m, b] : configs) {
    SCOPED_TRACE(testing::Message() << "N=" << n << " M=" << m << " b=" << b);
    EpochSharder sharder = MakeSharder(n, m, b);
    EpochPlan plan = sharder.PlanEpoch(2);
    std::vector<int> seen(n, 0);
    for (uint64_t step = 0; step < sharder.steps_per_epoch(); ++step) {
      uint64_t step_total = 0;
      std::vector<uint64_t> sizes;
      for (uint32_t rank = 0; rank < m; ++rank) {
        absl::StatusOr<absl::Span<const uint32_t>> batch =
            plan.BatchIndices(step, rank);
        ASSERT_TRUE(batch.ok()) << batch.status();
        EXPECT_EQ(batch->size(), *sharder.BatchSizeAt(step, rank));
        for (uint32_t i : *batch) ++seen[i];
        step_total += batch->size();
        sizes.push_back(batch->size());
      }
      if (step + 1 < sharder.steps_per_epoch()) {
        EXPECT_EQ(sizes, std::vector<uint64_t>(m, b)) << "step " << step;
      } else {
        // Split as evenly as possible, extras to the lowest ranks.
        EXPECT_TRUE(std::is_sorted(sizes.rbegin(), sizes.rend()));
        EXPECT_LE(sizes.front() - sizes.back(), 1u);
        EXPECT_LE(sizes.front(), b);
      }
      EXPECT_GT(step_total, 0u);
    }
    EXPECT_EQ(seen, std::vector<int>(n, 1));
  }
}

TEST(EpochSharderTest, LastBatchGoesToLowRanksFirst) {
  // 10 examples, global batch 8: one full step, then 2 for 4 workers.
  EpochSharder sharder = MakeSharder(10, 4, 2);
  EXPECT_EQ(*sharder.BatchSizeAt(1, 0), 1u);
  EXPECT_EQ(*sharder.BatchSizeAt(1, 1), 1u);
  EXPECT_EQ(*sharder.BatchSizeAt(1, 2), 0u);
  EXPECT_EQ(*sharder.BatchSizeAt(1, 3), 0u);
  EXPECT_TRUE(Indices(sharder, 0, 1, 3).empty());
}

TEST(EpochSharderTest, WorkersFollowPermutationInRankOrder) {
  EpochSharder sharder = MakeSharder(23, 3, 4);
  const std::vector<uint32_t> order = sharder.Permutation(5);
  std::vector<uint32_t> concatenated;
  for (uint64_t step = 0; step < sharder.steps_per_epoch(); ++step) {
    for (uint32_t rank = 0; rank < 3; ++rank) {
      std::vector<uint32_t> batch = Indices(sharder, 5, step, rank);
      concatenated.insert(concatenated.end(), batch.begin(), batch.end());
    }
  }
  EXPECT_EQ(concatenated, order);
}

TEST(EpochSharderTest, TwoWorkersMatchOneWorkerWithDoubleBatch) {
  for (uint64_t n : {100, 101, 37, 5}) {
    SCOPED_TRACE(testing::Message() << "N=" << n);
    EpochSharder two = MakeSharder(n, 2, 8, 99);
    EpochSharder one = MakeSharder(n, 1, 16, 99);
    ASSERT_EQ(two.steps_per_epoch(), one.steps_per_epoch());
    for (uint64_t epoch = 0; epoch < 3; ++epoch) {
      EpochPlan two_plan = two.PlanEpoch(epoch);
      EpochPlan one_plan = one.PlanEpoch(epoch);
      for (uint64_t step = 0; step < one.steps_per_epoch(); ++step) {
        absl::Span<const uint32_t> r0 = *two_plan.BatchIndices(step, 0);
        absl::Span<const uint32_t> r1 = *two_plan.BatchIndices(step, 1);
        std::vector<uint32_t> joined(r0.begin(), r0.end());
        joined.insert(joined.end(), r1.begin(), r1.end());
        absl::Span<const uint32_t> single = *one_plan.BatchIndices(step, 0);
        EXPECT_EQ(joined, std::vector<uint32_t>(single.begin(), single.end()))
            << "epoch " << epoch << " step " << step;
      }
    }
  }
}

TEST(EpochSharderTest, PlanMatchesDirectLookup) {
  EpochSharder sharder = MakeSharder(50, 3, 4);
  EpochPlan plan = sharder.PlanEpoch(8);
  EXPECT_EQ(plan.epoch(), 8u);
  for (uint64_t step = 0; step < sharder.steps_per_epoch(); ++step) {
    for (uint32_t rank = 0; rank < 3; ++rank) {
      absl::Span<const uint32_t> view = *plan.BatchIndices(step, rank);
      EXPECT_EQ(std::vector<uint32_t>(view.begin(), view.end()),
                Indices(sharder, 8, step, rank));
    }
  }
}

TEST(EpochSharderTest, RejectsOutOfRangeStepOrRank) {
  EpochSharder sharder = MakeSharder(10, 2, 3);  // 2 steps
  absl::Status step = sharder.BatchIndices(0, 2, 0).status();
  EXPECT_EQ(step.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.message(), HasSubstr("step 2"));
  absl::Status rank = sharder.BatchIndices(0, 0, 2).status();
  EXPECT_EQ(rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rank.message(), HasSubstr("rank 2"));
  EpochPlan plan = sharder.PlanEpoch(0);
  EXPECT_FALSE(plan.BatchIndices(2, 0).ok());
  EXPECT_FALSE(plan.BatchIndices(0, 2).ok());
  EXPECT_FALSE(sharder.BatchSizeAt(2, 0).ok());
  EXPECT_FALSE(sharder.ExamplesBeforeStep(3, 0).ok());
  EXPECT_FALSE(sharder.ExamplesBeforeStep(0, 2).ok());
  EXPECT_FALSE(sharder.ResumeStep(2, 0).ok());
}

TEST(EpochSharderTest, CountsExamplesBeforeEachStep) {
  EpochSharder sharder = MakeSharder(10, 4, 2);
  EXPECT_EQ(*sharder.ExamplesBeforeStep(0, 0), 0u);
  EXPECT_EQ(*sharder.ExamplesBeforeStep(1, 0), 2u);
  EXPECT_EQ(*sharder.ExamplesBeforeStep(2, 0), 3u);
  EXPECT_EQ(*sharder.ExamplesBeforeStep(2, 3), 2u);
}

TEST(EpochSharderTest, ResumeStepIsFirstUnfinishedStep) {
  for (const auto& [n, m, b] :
       std::vector<std::tuple<uint64_t, uint32_t, uint32_t>>{
           {100, 3, 7}, {10, 4, 2}, {64, 4, 16}, {5, 8, 1}}) {
    EpochSharder sharder = MakeSharder(n, m, b);
    const uint64_t steps = sharder.steps_per_epoch();
    for (uint32_t rank = 0; rank < m; ++rank) {
      for (uint64_t step = 0; step <= steps; ++step) {
        const uint64_t done = *sharder.ExamplesBeforeStep(step, rank);
        absl::StatusOr<uint64_t> resume = sharder.ResumeStep(rank, done);
        ASSERT_TRUE(resume.ok()) << resume.status();
        const bool last_is_empty = *sharder.BatchSizeAt(steps - 1, rank) == 0;
        if (step == steps - 1 && last_is_empty) {
          EXPECT_EQ(*resume, steps);  // nothing left to train on
        } else {
          EXPECT_EQ(*resume, step) << "N=" << n << " rank " << rank;
        }
      }
    }
  }
}

TEST(EpochSharderTest, ResumeStepRejectsCountsOffStepBoundaries) {
  EpochSharder sharder = MakeSharder(100, 3, 7);  // rank 0: 7 * 4 + 6
  EXPECT_EQ(*sharder.ExamplesBeforeStep(sharder.steps_per_epoch(), 0), 34u);
  absl::Status mid = sharder.ResumeStep(0, 8).status();
  EXPECT_EQ(mid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mid.message(), HasSubstr("8 examples"));
  EXPECT_FALSE(sharder.ResumeStep(0, 35).ok());
  EXPECT_FALSE(sharder.ResumeStep(0, 1000).ok());
}

LabeledImages SmallSet() {
  LabeledImages set;
  set.num_examples = 4;
  set.rows = 1;
  set.cols = 2;
  set.images = {0, 1, 10, 11, 20, 21, 30, 31};
  set.labels = {5, 6, 7, 8};
  return set;
}

TEST(GatherBatchTest, CopiesExamplesInOrder) {
  Batch batch;
  ASSERT_TRUE(GatherBatch(SmallSet(), {3, 0, 2}, &batch).ok());
  EXPECT_EQ(batch.size, 3);
  EXPECT_EQ(batch.example_size, 2);
  EXPECT_EQ(batch.images, (std::vector<float>{30, 31, 0, 1, 20, 21}));
  EXPECT_EQ(batch.labels, (std::vector<float>{8, 5, 7}));

  // Buffers are reused and resized for a smaller batch.
  ASSERT_TRUE(GatherBatch(SmallSet(), {1}, &batch).ok());
  EXPECT_EQ(batch.size, 1);
  EXPECT_EQ(batch.images, (std::vector<float>{10, 11}));
  EXPECT_EQ(batch.labels, (std::vector<float>{6}));
}

TEST(GatherBatchTest, RejectsOutOfRangeIndexWithoutTouchingOutput) {
  Batch batch;
  ASSERT_TRUE(GatherBatch(SmallSet(), {1}, &batch).ok());
  absl::Status status = GatherBatch(SmallSet(), {0, 4}, &batch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("example 4"));
  EXPECT_EQ(batch.size, 1);
  EXPECT_EQ(batch.images, (std::vector<float>{10, 11}));
}

TEST(GatherBatchTest, RejectsInconsistentDataSet) {
  LabeledImages set = SmallSet();
  set.labels.pop_back();
  Batch batch;
  absl::Status status = GatherBatch(set, {0}, &batch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("inconsistent"));
}

}  // namespace
}  // namespace ps::worker
