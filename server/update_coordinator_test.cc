#include "server/update_coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_util.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

using ::ps::server::testing::AllWeights;
using ::ps::server::testing::ConstantPush;
using ::ps::server::testing::ExpectBitIdentical;
using ::ps::server::testing::ExpectShiftedBy;
using ::ps::server::testing::FastOptions;
using ::ps::server::testing::GradientValues;
using ::ps::server::testing::IncarnationOf;
using ::ps::server::testing::kRandomPushRanks;
using ::ps::server::testing::LogCapture;
using ::ps::server::testing::MakeAdamStore;
using ::ps::server::testing::MakeCoordinator;
using ::ps::server::testing::MakeStore;
using ::ps::server::testing::PlainSgd;
using ::ps::server::testing::Pull;
using ::ps::server::testing::RandomPushes;
using ::ps::server::testing::ReferenceMeanStep;
using ::ps::server::testing::RegisterAll;
using ::ps::server::testing::SetGradientValues;

TEST(UpdateCoordinatorTest, SyncAppliesTheExampleWeightedAverageOnce) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 3);
  const auto before = AllWeights(*store);
  // (1 * 1 + 2 * 2 + 5 * 4) / (1 + 2 + 5) = 3.125
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 2, 0, 4.0f, 5)), 0u);
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 0, 0, 1.0f, 1)), 0u);
  EXPECT_EQ(AllWeights(*store), before) << "applied before all ranks pushed";
  EXPECT_EQ(coord->version(), 0u);
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 1, 0, 2.0f, 2)), 1u);
  EXPECT_EQ(coord->version(), 1u);
  ExpectShiftedBy(before, AllWeights(*store), 3.125f);
}

TEST(UpdateCoordinatorTest, SyncRefusesStaleAheadAndDuplicatePushes) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  const auto before = AllWeights(*store);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());

  // Another batch for the same step (the same batch would be a replay).
  StagedPush other_batch = ConstantPush(*store, 0, 0, 9);
  other_batch.examples_done += 1;
  absl::StatusOr<uint64_t> dup = coord->Commit(other_batch);
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("worker 0 already pushed step 0"),
            std::string::npos);

  absl::StatusOr<uint64_t> ahead = coord->Commit(ConstantPush(*store, 1, 1, 9));
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_EQ(*coord->Commit(ConstantPush(*store, 1, 0, 3.0f)), 1u);
  absl::StatusOr<uint64_t> stale = coord->Commit(std::move(other_batch));
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(stale.status().message().find("stale step 0"), std::string::npos);

  // Only the one accepted step reached the weights: mean of 1 and 3.
  ExpectShiftedBy(before, AllWeights(*store), 2.0f);
  EXPECT_EQ(coord->version(), 1u);
}

// Runs one sync step whose pushes arrive in `order`, each from its own
// thread, and returns the weights after it.
std::vector<std::vector<float>> RunStepInOrder(const std::vector<int>& order) {
  auto store = MakeAdamStore();
  auto coord =
      MakeCoordinator(store.get(), ConsistencyMode::kSync, kRandomPushRanks);
  std::vector<StagedPush> pushes = RandomPushes(*store);
  absl::Mutex mu;
  int turn = 0;
  std::vector<std::thread> threads;
  for (int position = 0; position < kRandomPushRanks; ++position) {
    threads.emplace_back([&, position] {
      const int rank = order[position];
      {
        absl::MutexLock lock(&mu);
        auto my_turn = [&] { return turn == position; };
        mu.Await(absl::Condition(&my_turn));
      }
      EXPECT_TRUE(coord->Commit(std::move(pushes[rank])).ok());
      absl::MutexLock lock(&mu);
      ++turn;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(coord->version(), 1u);
  return AllWeights(*store);
}

TEST(UpdateCoordinatorTest, SyncAggregationIsBitIdenticalInAnyArrivalOrder) {
  const auto reference = ReferenceMeanStep();
  std::vector<int> order = {0, 1, 2, 3};
  int permutations = 0;
  do {
    ExpectBitIdentical(
        RunStepInOrder(order), reference,
        absl::StrCat("arrival order ", order[0], order[1], order[2], order[3]));
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 24);
}

TEST(UpdateCoordinatorTest, ConcurrentPushersAllLandInOneStep) {
  auto store = MakeStore({30, 20, 10}, PlainSgd());
  constexpr int kWorkers = 8;
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, kWorkers);
  const auto before = AllWeights(*store);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      EXPECT_TRUE(coord->Commit(ConstantPush(*store, r, 0, r + 1.0f)).ok());
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(coord->version(), 1u);
  ExpectShiftedBy(before, AllWeights(*store), 4.5f);  // mean of 1..8
}

TEST(UpdateCoordinatorTest, AppliesLargeShardsInParallelCorrectly) {
  // Over a million elements: slices are updated by several threads.
  auto store = MakeStore({1024, 1024, 4}, PlainSgd());
  ASSERT_GE(store->num_elements(), 1u << 20);
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  const auto before = AllWeights(*store);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 0, 0.5f, 3)).ok());
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 0.25f, 1)).ok());
  ExpectShiftedBy(before, AllWeights(*store), 0.4375f);  // (0.25 + 1.5) / 4
}

TEST(UpdateCoordinatorTest, SyncPullWaitsUntilTheStepIsApplied) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  EXPECT_EQ(*Pull(*coord, 0, 0), 0u);
  // Rank 0 pushes before it pulls for the next step: a pull for step 1 from
  // a rank that has not pushed step 0 would count as its weight-0 part.
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  absl::Notification pulled;
  uint64_t pulled_version = 0;
  std::thread puller([&] {
    pulled_version = *Pull(*coord, 0, 1);
    pulled.Notify();
  });
  EXPECT_EQ(coord->RanksBlocking(1), std::vector<int>{1});
  EXPECT_FALSE(pulled.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 0, 1.0f)).ok());
  EXPECT_TRUE(pulled.WaitForNotificationWithTimeout(absl::Seconds(10)));
  puller.join();
  EXPECT_EQ(pulled_version, 1u);
  EXPECT_TRUE(coord->RanksBlocking(1).empty());
}

TEST(UpdateCoordinatorTest, AsyncAppliesEachPushAtOnceAndRecordsStaleness) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kAsync, 2);
  const auto before = AllWeights(*store);
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 0, 0, 1.0f, 10, 0)), 1u);
  ExpectShiftedBy(before, AllWeights(*store), 1.0f);
  // Rank 1 computed from version 0 too: one update behind when applied.
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 1, 0, 2.0f, 1, 0)), 2u);
  ExpectShiftedBy(before, AllWeights(*store), 3.0f);
  StagedPush third = ConstantPush(*store, 0, 1, 0.5f, 1, 2);
  third.examples_done = 11;  // After its batch of 10 and this one.
  EXPECT_EQ(*coord->Commit(std::move(third)), 3u);
  EXPECT_EQ(coord->staleness().count(), 3u);
  EXPECT_EQ(coord->staleness().CountInBucketOf(0), 2u);
  EXPECT_EQ(coord->staleness().CountInBucketOf(1), 1u);
  // A pull never waits, whatever its step.
  EXPECT_EQ(*Pull(*coord, 0, 1000), 3u);
}

TEST(UpdateCoordinatorTest, AsyncRefusesAStepTheRankAlreadyPushed) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kAsync, 2);
  StagedPush first = ConstantPush(*store, 0, 3, 1.0f);
  first.examples_done = 1;  // Its first batch (steps 0-2 went elsewhere).
  ASSERT_TRUE(coord->Commit(std::move(first)).ok());
  const auto after_first = AllWeights(*store);
  for (uint64_t step : {0u, 3u}) {
    StagedPush again = ConstantPush(*store, 0, step, 1.0f);
    again.examples_done = 2;  // New data, so not a replay.
    EXPECT_EQ(coord->Commit(std::move(again)).status().code(),
              absl::StatusCode::kAlreadyExists);
  }
  EXPECT_EQ(AllWeights(*store), after_first);
  EXPECT_EQ(coord->version(), 1u);
}

TEST(UpdateCoordinatorTest, SspLetsTheFastestRankRunAtMostStalenessAhead) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSsp, 2, 1);
  // Rank 0 races ahead; rank 1 has pushed nothing (next step 0).
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  EXPECT_EQ(*Pull(*coord, 0, 1), 1u);  // 1 - s <= 0
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 1, 1.0f)).ok());
  EXPECT_EQ(coord->version(), 2u);  // Applied at once.
  EXPECT_EQ(coord->RanksBlocking(2), std::vector<int>{1});

  absl::Notification pulled;
  std::thread puller([&] {
    EXPECT_TRUE(Pull(*coord, 0, 2).ok());
    pulled.Notify();
  });
  EXPECT_FALSE(pulled.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 0, 1.0f)).ok());
  EXPECT_TRUE(pulled.WaitForNotificationWithTimeout(absl::Seconds(10)));
  puller.join();
  EXPECT_EQ(coord->RanksBlocking(3), std::vector<int>{1});
}

TEST(UpdateCoordinatorTest, SspWithZeroStalenessBoundsLikeSync) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSsp, 2, 0);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  EXPECT_EQ(coord->RanksBlocking(1), std::vector<int>{1});
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 1, 0, 1.0f)).ok());
  EXPECT_TRUE(coord->RanksBlocking(1).empty());
  EXPECT_EQ(coord->RanksBlocking(2), (std::vector<int>{0, 1}));
}

TEST(UpdateCoordinatorTest, SspDoesNotWaitForRanksThatAreDone) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSsp, 2, 0);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  EXPECT_FALSE(coord->MarkDone(1));
  EXPECT_EQ(*Pull(*coord, 0, 1), 1u);
  EXPECT_TRUE(coord->MarkDone(0));
  EXPECT_TRUE(coord->MarkDone(0));  // Idempotent.
}

TEST(UpdateCoordinatorTest, WaitingPullGivesUpWhenCancelled) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  int polls = 0;
  absl::StatusOr<uint64_t> r =
      coord->AwaitPull(0, IncarnationOf(0), 1, [&] { return ++polls > 3; });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
}

TEST(UpdateCoordinatorTest, ShutdownWakesPullsAndRefusesPushes) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  absl::StatusOr<uint64_t> result;
  std::thread puller([&] { result = Pull(*coord, 0, 5); });
  absl::SleepFor(absl::Milliseconds(20));
  coord->Shutdown();
  puller.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(UpdateCoordinatorTest, SlowPullLogsWhichWorkersItWaitsFor) {
  LogCapture log;
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  CoordinatorOptions options = FastOptions(ConsistencyMode::kSync, 4);
  options.slow_wait_log = absl::Milliseconds(20);
  auto coord = *UpdateCoordinator::Create(store.get(), options);
  RegisterAll(*coord, 4);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 2, 0, 1.0f)).ok());
  const absl::Time give_up = absl::Now() + absl::Milliseconds(100);
  EXPECT_FALSE(coord
                   ->AwaitPull(0, IncarnationOf(0), 1,
                               [&] { return absl::Now() > give_up; })
                   .ok());
  EXPECT_NE(log.text().find("step 0 waiting on workers [1, 3]"),
            std::string::npos)
      << log.text();
}

TEST(UpdateCoordinatorTest, RegisterReportsTheRanksProgress) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kAsync, 2);
  // Its first batch of epoch 1 (epoch 0 went to the other shards).
  StagedPush p = ConstantPush(*store, 1, 6, 1.0f, 64);
  p.epoch = 1;
  p.examples_done = 64;
  ASSERT_TRUE(coord->Commit(std::move(p)).ok());
  RankProgress progress = *coord->Register(1, 99, 0);
  EXPECT_EQ(progress.next_step, 7u);
  EXPECT_EQ(progress.epoch, 1u);
  EXPECT_EQ(progress.examples_done, 64u);
  EXPECT_EQ(coord->Register(0, 5, 0)->next_step, 0u);
}

TEST(UpdateCoordinatorTest, RejectsInvalidOptionsNamingTheFlag) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  CoordinatorOptions options;
  options.num_workers = 0;
  EXPECT_NE(UpdateCoordinator::Create(store.get(), options)
                .status()
                .message()
                .find("--num_workers"),
            std::string::npos);
  options.num_workers = 1;
  options.staleness = -1;
  EXPECT_NE(UpdateCoordinator::Create(store.get(), options)
                .status()
                .message()
                .find("--staleness"),
            std::string::npos);
  EXPECT_EQ(*ParseConsistencyMode("ssp"), ConsistencyMode::kSsp);
  EXPECT_NE(ParseConsistencyMode("bsp").status().message().find("--mode"),
            std::string::npos);
}

TEST(UpdateCoordinatorTest, RefusesPushesThatDoNotFitTheShard) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kAsync, 2);
  StagedPush p = ConstantPush(*store, 0, 0, 1.0f);
  std::vector<std::vector<float>> values = GradientValues(p);
  values.back().pop_back();
  SetGradientValues(p, values);
  EXPECT_EQ(coord->Commit(std::move(p)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord->Commit(ConstantPush(*store, 2, 0, 1.0f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord->version(), 0u);
}

TEST(UpdateCoordinatorTest, AReplayedPushIsAcknowledgedAndNotApplied) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kAsync, 2);
  const auto before = AllWeights(*store);
  ASSERT_EQ(*coord->Commit(ConstantPush(*store, 0, 0, 1.0f, 10)), 1u);
  // The same batch (same progress) again, even under a later step number.
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 0, 0, 5.0f, 10)), 1u);
  StagedPush later = ConstantPush(*store, 0, 4, 5.0f, 10);
  later.examples_done = 10;
  EXPECT_EQ(*coord->Commit(std::move(later)), 1u);
  ExpectShiftedBy(before, AllWeights(*store), 1.0f);
  EXPECT_NE(coord->Report().find("examples per epoch: 0=10\n"),
            std::string::npos)
      << coord->Report();
  EXPECT_NE(
      coord->Report().find("replayed pushes acknowledged, not applied: 2"),
      std::string::npos);
}

TEST(UpdateCoordinatorTest, AnUpdateThatWouldOverflowKeepsTheWeightsFinite) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kAsync, 1);
  // A finite gradient whose step overflows every weight below zero.
  ASSERT_TRUE(coord
                  ->Commit(ConstantPush(*store, 0, 0,
                                        std::numeric_limits<float>::max()))
                  .ok());
  ASSERT_TRUE(coord
                  ->Commit(ConstantPush(*store, 0, 1,
                                        std::numeric_limits<float>::max()))
                  .ok());
  for (const std::vector<float>& slice : AllWeights(*store)) {
    for (float w : slice) EXPECT_TRUE(std::isfinite(w)) << w;
  }
  EXPECT_NE(coord->Report().find(
                absl::StrCat("slice updates that kept non-finite results out: ",
                             store->num_slices())),
            std::string::npos)
      << coord->Report();
}

TEST(UpdateCoordinatorTest, SyncReplayTakesPartInTheStepWithWeightZero) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f, 4)).ok());
  ASSERT_EQ(*coord->Commit(ConstantPush(*store, 1, 0, 1.0f, 4)), 1u);
  const auto before = AllWeights(*store);
  // Rank 1 resumed from an earlier point and resends its step-0 batch as
  // step 1: it counts as taking part, so the step needs no one else.
  StagedPush replay = ConstantPush(*store, 1, 1, 9.0f, 4);
  replay.examples_done = 4;
  EXPECT_EQ(*coord->Commit(std::move(replay)), 1u);
  EXPECT_EQ(coord->RanksBlocking(2), std::vector<int>{0});
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 0, 1, 2.0f, 4)), 2u);
  ExpectShiftedBy(before, AllWeights(*store), 2.0f);  // Rank 0's alone.
  EXPECT_NE(coord->Report().find("examples per epoch: 0=12\n"),
            std::string::npos)
      << coord->Report();
}

TEST(UpdateCoordinatorTest, SyncStepOfEmptySharesAdvancesWithoutAnUpdate) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  const auto before = AllWeights(*store);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 3.0f, 0)).ok());
  ASSERT_EQ(*coord->Commit(ConstantPush(*store, 1, 0, 3.0f, 0)), 1u);
  EXPECT_EQ(AllWeights(*store), before);
  // An empty share next to a real one weighs nothing.
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 1, 8.0f, 0)).ok());
  StagedPush real = ConstantPush(*store, 1, 1, 2.0f, 3);
  real.examples_done = 3;  // Its first batch.
  ASSERT_EQ(*coord->Commit(std::move(real)), 2u);
  ExpectShiftedBy(before, AllWeights(*store), 2.0f);
  EXPECT_EQ(coord->staleness().count(), 1u);
  // Rank 0's share of the next step is empty too: its progress does not
  // move, which is no replay of a batch.
  StagedPush empty = ConstantPush(*store, 0, 2, 8.0f, 0);
  empty.examples_done = 0;
  ASSERT_TRUE(coord->Commit(std::move(empty)).ok());
  EXPECT_NE(
      coord->Report().find("replayed pushes acknowledged, not applied: 0"),
      std::string::npos)
      << coord->Report();
  EXPECT_EQ(coord->RanksBlocking(3), std::vector<int>{1});
}

TEST(UpdateCoordinatorTest, AsyncEmptyPushTakesItsStepWithoutAnUpdate) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSsp, 2, 0);
  const auto before = AllWeights(*store);
  ASSERT_EQ(*coord->Commit(ConstantPush(*store, 1, 0, 3.0f, 0)), 0u);
  EXPECT_EQ(AllWeights(*store), before);
  EXPECT_EQ(coord->RanksBlocking(1), std::vector<int>{0});  // 1 moved on.
}

TEST(UpdateCoordinatorTest, CosineScheduleSetsEachUpdatesLearningRate) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  CoordinatorOptions options = FastOptions(ConsistencyMode::kSync, 1);
  options.lr_schedule = *update::LearningRateSchedule::Create(
      update::LrScheduleKind::kCosine, 1.0f, 0.0f);
  auto coord = *UpdateCoordinator::Create(store.get(), options);
  EXPECT_EQ(coord->Register(0, IncarnationOf(0), 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(coord->Register(0, IncarnationOf(0), 4).ok());
  auto before = AllWeights(*store);
  // lr(u) = (1 + cos(pi * u / 4)) / 2: 1, 0.854, 0.5, 0.146, then 0.
  const float expected[] = {1.0f, 0.85355339f, 0.5f, 0.14644661f, 0.0f};
  for (uint64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, step, 1.0f)).ok());
    const auto after = AllWeights(*store);
    ExpectShiftedBy(before, after, expected[step]);
    before = after;
  }
}

}  // namespace
}  // namespace ps::server
