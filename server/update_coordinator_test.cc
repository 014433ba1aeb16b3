#include "server/update_coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/model_spec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace ps::server {
namespace {

OptimizerConfig PlainSgd() {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.learning_rate = 1.0f;  // w' = w - g: updates are easy to read back.
  c.momentum = 0.0f;
  return c;
}

std::unique_ptr<ShardStore> MakeStore(std::vector<int> layers,
                                      const OptimizerConfig& config) {
  absl::StatusOr<Partition> p = Partition::Create(MlpModelSpec(layers), 1);
  EXPECT_TRUE(p.ok());
  return *ShardStore::Create(*p, 0, /*seed=*/3, config);
}

std::unique_ptr<UpdateCoordinator> MakeCoordinator(ShardStore* store,
                                                   ConsistencyMode mode,
                                                   int num_workers,
                                                   int staleness = 0) {
  CoordinatorOptions options;
  options.mode = mode;
  options.num_workers = num_workers;
  options.staleness = staleness;
  options.poll_interval = absl::Milliseconds(5);
  absl::StatusOr<std::unique_ptr<UpdateCoordinator>> c =
      UpdateCoordinator::Create(store, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

// A push whose every gradient element is `value`.
StagedPush ConstantPush(const ShardStore& store, int rank, uint64_t step,
                        float value, uint32_t num_examples = 1,
                        uint64_t base_version = 0) {
  StagedPush p;
  p.rank = rank;
  p.step = step;
  p.base_version = base_version;
  p.num_examples = num_examples;
  for (const Slice& s : store.slices()) {
    p.gradients.emplace_back(s.num_elements, value);
  }
  return p;
}

std::vector<std::vector<float>> AllWeights(const ShardStore& store) {
  std::vector<std::vector<float>> w;
  for (int i = 0; i < store.num_slices(); ++i) w.push_back(store.ReadSlice(i));
  return w;
}

// Every weight of `after` equals the same weight of `before` minus `delta`.
void ExpectShiftedBy(const std::vector<std::vector<float>>& before,
                     const std::vector<std::vector<float>>& after,
                     float delta) {
  ASSERT_EQ(before.size(), after.size());
  for (size_t s = 0; s < before.size(); ++s) {
    for (size_t i = 0; i < before[s].size(); ++i) {
      ASSERT_FLOAT_EQ(after[s][i], before[s][i] - delta)
          << "slice " << s << " element " << i;
    }
  }
}

auto NeverCancelled = [] { return false; };

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

  absl::StatusOr<uint64_t> dup = coord->Commit(ConstantPush(*store, 0, 0, 9));
  EXPECT_EQ(dup.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(dup.status().message().find("rank 0 already pushed step 0"),
            std::string::npos);

  absl::StatusOr<uint64_t> ahead = coord->Commit(ConstantPush(*store, 1, 1, 9));
  EXPECT_EQ(ahead.status().code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_EQ(*coord->Commit(ConstantPush(*store, 1, 0, 3.0f)), 1u);
  absl::StatusOr<uint64_t> stale = coord->Commit(ConstantPush(*store, 0, 0, 9));
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(stale.status().message().find("stale step 0"), std::string::npos);

  // Only the one accepted step reached the weights: mean of 1 and 3.
  ExpectShiftedBy(before, AllWeights(*store), 2.0f);
  EXPECT_EQ(coord->version(), 1u);
}

constexpr int kOrderWorkers = 4;

std::unique_ptr<ShardStore> MakeAdamStore() {
  OptimizerConfig adam;
  adam.learning_rate = 0.01f;
  return MakeStore({30, 20, 10}, adam);
}

// Random gradients of very different sizes and example counts, so that any
// change in summation order shows in the low bits.
std::vector<StagedPush> RandomPushes(const ShardStore& store) {
  std::vector<StagedPush> pushes;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const uint32_t examples[kOrderWorkers] = {7, 64, 1, 33};
  for (int r = 0; r < kOrderWorkers; ++r) {
    StagedPush p = ConstantPush(store, r, 0, 0.0f, examples[r]);
    for (auto& g : p.gradients) {
      for (float& v : g) v = dist(rng) * std::pow(10.0f, r);
    }
    pushes.push_back(std::move(p));
  }
  return pushes;
}

// Runs one sync step whose pushes arrive in `order`, each from its own
// thread, and returns the weights after it.
std::vector<std::vector<float>> RunStepInOrder(const std::vector<int>& order) {
  auto store = MakeAdamStore();
  auto coord =
      MakeCoordinator(store.get(), ConsistencyMode::kSync, kOrderWorkers);
  std::vector<StagedPush> pushes = RandomPushes(*store);
  absl::Mutex mu;
  int turn = 0;
  std::vector<std::thread> threads;
  for (int position = 0; position < kOrderWorkers; ++position) {
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

// The documented formula, g = sum_r(n_r * g_r) / sum_r(n_r) in rank order,
// applied straight to a store.
std::vector<std::vector<float>> ReferenceStep() {
  auto store = MakeAdamStore();
  std::vector<StagedPush> pushes = RandomPushes(*store);
  double total = 0;
  for (const StagedPush& p : pushes) total += p.num_examples;
  for (int s = 0; s < store->num_slices(); ++s) {
    std::vector<float> g(store->slices()[s].num_elements);
    for (size_t i = 0; i < g.size(); ++i) {
      double sum = 0;
      for (const StagedPush& p : pushes) {
        sum += static_cast<double>(p.num_examples) * p.gradients[s][i];
      }
      g[i] = static_cast<float>(sum / total);
    }
    EXPECT_TRUE(store->ApplyGradient(s, g).ok());
  }
  return AllWeights(*store);
}

void ExpectBitIdentical(const std::vector<std::vector<float>>& a,
                        const std::vector<std::vector<float>>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(a[s].size(), b[s].size());
    ASSERT_EQ(
        0, std::memcmp(a[s].data(), b[s].data(), a[s].size() * sizeof(float)))
        << "slice " << s << " differs: " << what;
  }
}

TEST(UpdateCoordinatorTest, SyncAggregationIsBitIdenticalInAnyArrivalOrder) {
  const auto reference = ReferenceStep();
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
  EXPECT_EQ(*coord->AwaitPull(0, NeverCancelled), 0u);
  absl::Notification pulled;
  uint64_t pulled_version = 0;
  std::thread puller([&] {
    pulled_version = *coord->AwaitPull(1, NeverCancelled);
    pulled.Notify();
  });
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
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
  EXPECT_EQ(*coord->Commit(ConstantPush(*store, 0, 1, 0.5f, 1, 2)), 3u);
  EXPECT_EQ(coord->staleness().count(), 3u);
  EXPECT_EQ(coord->staleness().CountInBucketOf(0), 2u);
  EXPECT_EQ(coord->staleness().CountInBucketOf(1), 1u);
  // A pull never waits, whatever its clock.
  EXPECT_EQ(*coord->AwaitPull(1000, NeverCancelled), 3u);
}

TEST(UpdateCoordinatorTest, AsyncRefusesAStepTheRankAlreadyPushed) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kAsync, 2);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 3, 1.0f)).ok());
  const auto after_first = AllWeights(*store);
  for (uint64_t step : {0u, 3u}) {
    absl::StatusOr<uint64_t> again =
        coord->Commit(ConstantPush(*store, 0, step, 1.0f));
    EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  }
  EXPECT_EQ(AllWeights(*store), after_first);
  EXPECT_EQ(coord->version(), 1u);
}

TEST(UpdateCoordinatorTest, SspLetsTheFastestRankRunAtMostStalenessAhead) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSsp, 2, 1);
  // Rank 0 races ahead; rank 1 has pushed nothing (clock 0).
  EXPECT_EQ(*coord->AwaitPull(1, NeverCancelled), 0u);  // 1 - s <= 0
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 1, 1.0f)).ok());
  EXPECT_EQ(coord->version(), 2u);  // Applied at once.
  EXPECT_EQ(coord->RanksBlocking(2), std::vector<int>{1});

  absl::Notification pulled;
  std::thread puller([&] {
    EXPECT_TRUE(coord->AwaitPull(2, NeverCancelled).ok());
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
  EXPECT_EQ(*coord->AwaitPull(1, NeverCancelled), 1u);
  EXPECT_TRUE(coord->MarkDone(0));
  EXPECT_TRUE(coord->MarkDone(0));  // Idempotent.
}

TEST(UpdateCoordinatorTest, WaitingPullGivesUpWhenCancelled) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  int polls = 0;
  absl::StatusOr<uint64_t> r = coord->AwaitPull(1, [&] { return ++polls > 3; });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
}

TEST(UpdateCoordinatorTest, ShutdownWakesPullsAndRefusesPushes) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kSync, 2);
  absl::StatusOr<uint64_t> result;
  std::thread puller([&] { result = coord->AwaitPull(5, NeverCancelled); });
  absl::SleepFor(absl::Milliseconds(20));
  coord->Shutdown();
  puller.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(UpdateCoordinatorTest, SlowPullLogsWhichWorkersItWaitsFor) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));

  auto store = MakeStore({6, 4, 2}, PlainSgd());
  CoordinatorOptions options;
  options.mode = ConsistencyMode::kSync;
  options.num_workers = 4;
  options.slow_pull_log_after = absl::Milliseconds(20);
  options.poll_interval = absl::Milliseconds(5);
  auto coord = *UpdateCoordinator::Create(store.get(), options);
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 0, 0, 1.0f)).ok());
  ASSERT_TRUE(coord->Commit(ConstantPush(*store, 2, 0, 1.0f)).ok());
  const absl::Time give_up = absl::Now() + absl::Milliseconds(100);
  EXPECT_FALSE(coord->AwaitPull(1, [&] { return absl::Now() > give_up; }).ok());
  spdlog::set_default_logger(previous);
  EXPECT_NE(log.str().find("pull for clock 1 waiting on workers [1, 3]"),
            std::string::npos)
      << log.str();
}

TEST(UpdateCoordinatorTest, RegisterReportsTheRanksProgress) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  auto coord = MakeCoordinator(store.get(), ConsistencyMode::kAsync, 2);
  StagedPush p = ConstantPush(*store, 1, 6, 1.0f);
  p.epoch = 2;
  p.examples_done = 640;
  ASSERT_TRUE(coord->Commit(std::move(p)).ok());
  RankProgress progress = coord->Register(1, 99);
  EXPECT_EQ(progress.next_step, 7u);
  EXPECT_EQ(progress.epoch, 2u);
  EXPECT_EQ(progress.examples_done, 640u);
  EXPECT_EQ(coord->Register(0, 5).next_step, 0u);
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
  p.gradients.back().pop_back();
  EXPECT_EQ(coord->Commit(std::move(p)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord->Commit(ConstantPush(*store, 2, 0, 1.0f)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord->version(), 0u);
}

}  // namespace
}  // namespace ps::server
