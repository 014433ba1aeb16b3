#include "server/step_parts.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator_test_util.h"

namespace ps::server {
namespace {

using ::ps::server::testing::AllWeights;
using ::ps::server::testing::ConstantPush;
using ::ps::server::testing::ExpectBitIdentical;
using ::ps::server::testing::ExpectShiftedBy;
using ::ps::server::testing::kRandomPushRanks;
using ::ps::server::testing::LogCapture;
using ::ps::server::testing::MakeAdamStore;
using ::ps::server::testing::MakeStore;
using ::ps::server::testing::PlainSgd;
using ::ps::server::testing::RandomPushes;
using ::ps::server::testing::ReferenceMeanStep;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// The live path: the step's mean, then the mean applied.
absl::Status Apply(update::ShardStore& store, const ReadyStep& step) {
  return ApplyStepMean(store, StepMean(store, step));
}

std::vector<int> RanksOf(const ReadyStep& step) {
  std::vector<int> ranks;
  for (const StagedPush& p : step.pushes) ranks.push_back(p.rank);
  return ranks;
}

TEST(StepPartsTest, TakesThePushesInRankOrderWhateverTheArrivalOrder) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  StepParts parts(3);
  EXPECT_FALSE(parts.any_part());
  parts.Add(ConstantPush(*store, 2, 5, 1.0f));
  parts.Add(ConstantPush(*store, 0, 5, 1.0f));
  EXPECT_THAT(parts.has_part(), ElementsAre(true, false, true));
  EXPECT_TRUE(parts.any_part());

  ReadyStep ready = parts.Take(5, std::nullopt, {});
  EXPECT_EQ(ready.step, 5u);
  EXPECT_THAT(RanksOf(ready), ElementsAre(0, 2));
}

TEST(StepPartsTest, AWeightZeroPartHasNoPush) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  StepParts parts(3);
  parts.AddWithoutPush(1);
  parts.Add(ConstantPush(*store, 2, 0, 1.0f));
  EXPECT_THAT(parts.has_part(), ElementsAre(false, true, true));
  EXPECT_THAT(RanksOf(parts.Take(0, std::nullopt, {})), ElementsAre(2));
}

TEST(StepPartsTest, PartsStayMarkedWhileTheStepIsApplied) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  StepParts parts(2);
  parts.Add(ConstantPush(*store, 0, 0, 1.0f));
  parts.Add(ConstantPush(*store, 1, 0, 1.0f));
  EXPECT_FALSE(parts.applying());
  parts.Take(0, std::nullopt, {});
  // A repeated push is refused meanwhile (the policy reads has_part).
  EXPECT_TRUE(parts.applying());
  EXPECT_THAT(parts.has_part(), ElementsAre(true, true));

  parts.Applied();
  EXPECT_FALSE(parts.applying());
  EXPECT_FALSE(parts.any_part());
  // The pushes were taken: the next step starts empty.
  parts.AddWithoutPush(0);
  EXPECT_THAT(RanksOf(parts.Take(1, std::nullopt, {})), ElementsAre());
}

TEST(StepPartsTest, ClearDropsThePartsAndTheirPushes) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  StepParts parts(2);
  parts.Add(ConstantPush(*store, 0, 0, 1.0f));
  parts.AddWithoutPush(1);
  parts.Clear();
  EXPECT_FALSE(parts.any_part());
  parts.AddWithoutPush(1);
  EXPECT_THAT(RanksOf(parts.Take(0, std::nullopt, {})), ElementsAre());
}

TEST(StepPartsTest, TheLowestRankThatSetsALearningRateSetsTheStepsRate) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  StepParts parts(3);
  EXPECT_EQ(parts.Take(0, 0.1f, {}).learning_rate, 0.1f)
      << "no worker set one: the schedule's";
  parts.Applied();

  StagedPush set_by_2 = ConstantPush(*store, 2, 1, 1.0f);
  set_by_2.learning_rate = 0.25f;
  StagedPush set_by_1 = ConstantPush(*store, 1, 1, 1.0f);
  set_by_1.learning_rate = 0.5f;
  parts.Add(std::move(set_by_2));
  parts.Add(ConstantPush(*store, 0, 1, 1.0f));
  parts.Add(std::move(set_by_1));
  EXPECT_EQ(parts.Take(1, 0.1f, {}).learning_rate, 0.5f);
}

TEST(StepPartsTest, LogsTheRanksAStepGoesOnWithoutWhenTheyChange) {
  LogCapture log;
  StepParts parts(3);
  parts.AddWithoutPush(0);
  parts.Take(0, std::nullopt, {2});
  EXPECT_THAT(log.text(), HasSubstr("step 0 goes on without dead worker 2"));
  parts.Applied();

  parts.AddWithoutPush(0);
  parts.Take(1, std::nullopt, {2});
  EXPECT_THAT(log.text(), Not(HasSubstr("step 1")));
  parts.Applied();

  parts.AddWithoutPush(0);
  parts.Take(2, std::nullopt, {1, 2});
  EXPECT_THAT(log.text(),
              HasSubstr("step 2 goes on without dead workers 1, 2"));
  parts.Applied();

  parts.AddWithoutPush(0);
  parts.Take(3, std::nullopt, {});
  EXPECT_THAT(log.text(),
              HasSubstr("step 3: every live worker takes part again"));
}

TEST(StepPartsTest, AppliesTheExampleWeightedMean) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  const auto before = AllWeights(*store);
  StepParts parts(3);
  parts.Add(ConstantPush(*store, 2, 0, 4.0f, 5));
  parts.Add(ConstantPush(*store, 0, 0, 1.0f, 1));
  parts.Add(ConstantPush(*store, 1, 0, 2.0f, 2));
  ASSERT_TRUE(Apply(*store, parts.Take(0, std::nullopt, {})).ok());
  // (1 * 1 + 2 * 2 + 5 * 4) / (1 + 2 + 5)
  ExpectShiftedBy(before, AllWeights(*store), 3.125f);
}

TEST(StepPartsTest, AStepOfEmptyPushesChangesNothing) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  const auto before = AllWeights(*store);
  StepParts parts(2);
  parts.Add(ConstantPush(*store, 0, 0, 7.0f, 0));
  parts.Add(ConstantPush(*store, 1, 0, 9.0f, 0));
  ASSERT_TRUE(Apply(*store, parts.Take(0, std::nullopt, {})).ok());
  EXPECT_EQ(AllWeights(*store), before);
}

TEST(StepPartsTest, TheStepIsBitIdenticalToTheFormulaInAnyArrivalOrder) {
  const auto reference = ReferenceMeanStep();
  std::vector<int> order(kRandomPushRanks);
  for (int r = 0; r < kRandomPushRanks; ++r) order[r] = r;
  int permutations = 0;
  do {
    auto store = MakeAdamStore();
    std::vector<StagedPush> pushes = RandomPushes(*store);
    StepParts parts(kRandomPushRanks);
    for (int rank : order) parts.Add(std::move(pushes[rank]));
    ASSERT_TRUE(Apply(*store, parts.Take(0, std::nullopt, {})).ok());
    ExpectBitIdentical(
        AllWeights(*store), reference,
        absl::StrCat("arrival order ", order[0], order[1], order[2], order[3]));
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 24);
}

TEST(StepPartsTest, TheStepMeanHoldsThePartsInRankOrderAndOneMean) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  StepParts parts(3);
  StagedPush two = ConstantPush(*store, 2, 7, 4.0f, 5);
  two.base_version = 6;
  two.epoch = 1;
  two.examples_done = 40;
  parts.Add(std::move(two));
  parts.Add(ConstantPush(*store, 0, 7, 1.0f, 3));
  parts.AddWithoutPush(1);
  const update::LoggedStepMean mean = StepMean(*store, parts.Take(7, 0.5f, {}));
  EXPECT_EQ(mean.step, 7u);
  EXPECT_EQ(mean.learning_rate, 0.5f);
  ASSERT_EQ(mean.parts.size(), 2u);  // Weight-0 parts without a push: none.
  EXPECT_EQ(mean.parts[0].rank, 0);
  EXPECT_EQ(mean.parts[0].num_examples, 3u);
  EXPECT_EQ(mean.parts[1].rank, 2);
  EXPECT_EQ(mean.parts[1].base_version, 6u);
  EXPECT_EQ(mean.parts[1].epoch, 1u);
  EXPECT_EQ(mean.parts[1].examples_done, 40u);
  // One vector per slice, each the slice's length: (3 * 1 + 5 * 4) / 8.
  ASSERT_EQ(mean.mean.size(), static_cast<size_t>(store->num_slices()));
  for (size_t s = 0; s < mean.mean.size(); ++s) {
    EXPECT_EQ(mean.mean[s].size(), store->slices()[s].num_elements);
    for (float g : mean.mean[s]) EXPECT_EQ(g, 2.875f);
  }
}

TEST(StepPartsTest, AStepOfEmptyPushesHasNoMean) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  StepParts parts(2);
  parts.Add(ConstantPush(*store, 0, 0, 7.0f, 0));
  parts.Add(ConstantPush(*store, 1, 0, 9.0f, 0));
  const update::LoggedStepMean mean =
      StepMean(*store, parts.Take(0, std::nullopt, {}));
  EXPECT_EQ(mean.parts.size(), 2u);
  EXPECT_TRUE(mean.mean.empty());
}

// What the update log replays: the step's record, encoded and decoded,
// applied to a second store gives the live store's bits.
TEST(StepPartsTest, TheLoggedMeanReappliedIsBitIdentical) {
  auto live = MakeAdamStore();
  auto replayed = MakeAdamStore();
  StepParts parts(kRandomPushRanks);
  for (StagedPush& p : RandomPushes(*live)) parts.Add(std::move(p));
  const update::LoggedStepMean mean =
      StepMean(*live, parts.Take(0, std::nullopt, {}));
  ASSERT_TRUE(ApplyStepMean(*live, mean).ok());
  ExpectBitIdentical(AllWeights(*live), ReferenceMeanStep(), "live");
  absl::StatusOr<update::LogRecord> back =
      update::DecodeLogRecord(update::EncodeLogRecord(mean));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(
      ApplyStepMean(*replayed, std::get<update::LoggedStepMean>(*back)).ok());
  ExpectBitIdentical(AllWeights(*replayed), AllWeights(*live), "replayed");
}

TEST(StepPartsTest, RefusesAMeanOfAnotherLayoutChangingNothing) {
  auto store = MakeStore({6, 4, 2}, PlainSgd());
  const auto before = AllWeights(*store);
  update::LoggedStepMean mean;
  mean.step = 3;
  for (const Slice& slice : store->slices()) {
    mean.mean.emplace_back(slice.num_elements, 1.0f);
  }
  mean.mean.back().push_back(1.0f);
  absl::Status s = ApplyStepMean(*store, mean);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      s.message(),
      HasSubstr(absl::StrCat("has ", mean.mean.back().size(),
                             " elements in slice ", store->num_slices() - 1)));
  mean.mean.pop_back();
  EXPECT_THAT(
      ApplyStepMean(*store, mean).message(),
      HasSubstr(absl::StrCat("has ", store->num_slices() - 1,
                             " slices; this shard has ", store->num_slices())));
  EXPECT_EQ(AllWeights(*store), before);
}

}  // namespace
}  // namespace ps::server
