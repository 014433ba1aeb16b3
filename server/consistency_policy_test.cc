#include "server/consistency_policy.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/rank_registry.h"

namespace ps::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kStart = absl::FromUnixSeconds(1000);
constexpr absl::Duration kLease = absl::Seconds(10);

// The state a policy decides on, built up by a test.
class PolicyTest : public ::testing::Test {
 protected:
  StepView View() const {
    return StepView{version_, applying_, has_part_, ranks_};
  }
  // Every rank but `rank` is heard from after its lease ran out: `rank`
  // alone is declared dead.
  void KillRank(int rank) {
    const absl::Time later = kStart + 2 * kLease;
    for (int r = 0; r < ranks_.num_workers(); ++r) {
      if (r != rank) ranks_.Touch(r, later);
    }
    ASSERT_THAT(ranks_.LeasesRunOut(later), ElementsAre(rank));
    ranks_.MarkDead(rank);
  }

  uint64_t version_ = 0;
  bool applying_ = false;
  std::vector<bool> has_part_ = std::vector<bool>(3, false);
  RankRegistry ranks_{3, kLease, kStart};
};

TEST_F(PolicyTest, CreatePicksThePolicyOfTheMode) {
  for (ConsistencyMode mode : {ConsistencyMode::kSync, ConsistencyMode::kSsp,
                               ConsistencyMode::kAsync}) {
    EXPECT_EQ(ConsistencyPolicy::Create(mode, 1)->mode(), mode);
  }
}

TEST_F(PolicyTest, SyncAdmitsOnlyTheStepBeingCollected) {
  auto sync = ConsistencyPolicy::Create(ConsistencyMode::kSync, 0);
  version_ = 3;
  EXPECT_TRUE(sync->AdmitPush(View(), 0, 3).ok());

  absl::Status stale = sync->AdmitPush(View(), 0, 2);
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(stale.message()),
              HasSubstr("stale step 2 from worker 0: shard is at version 3"));

  absl::Status ahead = sync->AdmitPush(View(), 1, 4);
  EXPECT_EQ(ahead.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ahead.message()), HasSubstr("is ahead"));

  has_part_[2] = true;
  absl::Status again = sync->AdmitPush(View(), 2, 3);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.message()),
              HasSubstr("worker 2 already pushed step 3"));

  // The step is being applied without rank 0: it completed without it.
  applying_ = true;
  absl::Status late = sync->AdmitPush(View(), 0, 3);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(late.message()), HasSubstr("and applies it"));
}

TEST_F(PolicyTest, SyncStepWaitsForEveryActiveRank) {
  auto sync = ConsistencyPolicy::Create(ConsistencyMode::kSync, 0);
  EXPECT_TRUE(sync->CollectsSteps());
  EXPECT_EQ(sync->StepReady(View()), std::nullopt) << "nobody has a part";
  has_part_[0] = has_part_[1] = true;
  EXPECT_EQ(sync->StepReady(View()), std::nullopt) << "rank 2 is missing";
  has_part_[2] = true;
  EXPECT_EQ(sync->StepReady(View()), std::vector<int>{});
  applying_ = true;
  EXPECT_EQ(sync->StepReady(View()), std::nullopt) << "already taken";
}

TEST_F(PolicyTest, SyncStepGoesOnWithoutDeadAndDoneRanks) {
  auto sync = ConsistencyPolicy::Create(ConsistencyMode::kSync, 0);
  has_part_[0] = true;
  ranks_.MarkDone(1);
  EXPECT_EQ(sync->StepReady(View()), std::nullopt) << "rank 2 is live";
  KillRank(2);
  // Only the dead are named: the done rank has left for good.
  EXPECT_EQ(sync->StepReady(View()), std::vector<int>{2});
}

TEST_F(PolicyTest, SyncPullWaitsForItsStep) {
  auto sync = ConsistencyPolicy::Create(ConsistencyMode::kSync, 0);
  version_ = 3;
  has_part_[1] = true;
  EXPECT_TRUE(sync->PullReady(View(), 3));
  EXPECT_THAT(sync->RanksBlocking(View(), 3), IsEmpty());
  EXPECT_FALSE(sync->PullReady(View(), 4));
  EXPECT_THAT(sync->RanksBlocking(View(), 4), ElementsAre(0, 2));
  KillRank(2);
  EXPECT_THAT(sync->RanksBlocking(View(), 4), ElementsAre(0));
  EXPECT_THAT(sync->SlowPullMessage(0, 4, "2", 5, 3),
              HasSubstr("step 3 waiting on workers [2] for 5 s"));
}

TEST_F(PolicyTest, SyncGivesAWeightZeroPartToARankThatMovedOn) {
  auto sync = ConsistencyPolicy::Create(ConsistencyMode::kSync, 0);
  version_ = 3;
  EXPECT_TRUE(sync->TakesPartWithoutPush(View(), 0, 4));
  EXPECT_FALSE(sync->TakesPartWithoutPush(View(), 0, 3)) << "still to push";
  EXPECT_FALSE(sync->TakesPartWithoutPush(View(), 0, 5)) << "not this step";
  EXPECT_TRUE(sync->ReplayTakesPart(View(), 0, 3));
  EXPECT_FALSE(sync->ReplayTakesPart(View(), 0, 2));
  has_part_[0] = true;
  EXPECT_FALSE(sync->TakesPartWithoutPush(View(), 0, 4));
  EXPECT_FALSE(sync->ReplayTakesPart(View(), 0, 3));
  has_part_[0] = false;
  applying_ = true;
  EXPECT_FALSE(sync->TakesPartWithoutPush(View(), 0, 4));
  EXPECT_FALSE(sync->ReplayTakesPart(View(), 0, 3));
}

TEST_F(PolicyTest, SyncCountsGlobalSteps) {
  auto sync = ConsistencyPolicy::Create(ConsistencyMode::kSync, 0);
  version_ = 7;
  ranks_.RaiseNextStep(1, 3);
  EXPECT_EQ(sync->ResumeStep(View(), 1), 7u);
  EXPECT_EQ(sync->PlannedUpdates(100, 3), 100u);
  EXPECT_TRUE(sync->FastForwardsAfterRestore());
}

TEST_F(PolicyTest, SspPullWaitsForRanksBeyondTheBound) {
  auto ssp = ConsistencyPolicy::Create(ConsistencyMode::kSsp, 2);
  ranks_.RaiseNextStep(0, 6);
  ranks_.RaiseNextStep(1, 3);
  ranks_.RaiseNextStep(2, 4);
  // A pull for step t needs every active rank at next step t - 2 or beyond.
  EXPECT_TRUE(ssp->PullReady(View(), 5));
  EXPECT_FALSE(ssp->PullReady(View(), 6));
  EXPECT_THAT(ssp->RanksBlocking(View(), 6), ElementsAre(1));
  EXPECT_THAT(ssp->RanksBlocking(View(), 7), ElementsAre(1, 2));
  EXPECT_TRUE(ssp->PullReady(View(), 2)) << "within the bound of step 0";
  ranks_.MarkDone(1);
  EXPECT_THAT(ssp->RanksBlocking(View(), 7), ElementsAre(2));
  EXPECT_THAT(ssp->SlowPullMessage(0, 7, "2", 5, 9),
              HasSubstr("ssp staleness 2"));
}

TEST_F(PolicyTest, AsyncPullNeverWaits) {
  auto async = ConsistencyPolicy::Create(ConsistencyMode::kAsync, 0);
  ranks_.RaiseNextStep(0, 100);
  EXPECT_TRUE(async->PullReady(View(), 100));
  EXPECT_THAT(async->RanksBlocking(View(), 100), IsEmpty());
}

TEST_F(PolicyTest, SspAndAsyncApplyEachPushAndKeepEachRanksNextStep) {
  for (ConsistencyMode mode :
       {ConsistencyMode::kSsp, ConsistencyMode::kAsync}) {
    SCOPED_TRACE(ConsistencyModeName(mode));
    auto policy = ConsistencyPolicy::Create(mode, 1);
    ranks_.RaiseNextStep(1, 5);
    version_ = 20;
    EXPECT_FALSE(policy->CollectsSteps());
    has_part_.assign(3, true);
    EXPECT_EQ(policy->StepReady(View()), std::nullopt);
    EXPECT_TRUE(policy->AdmitPush(View(), 1, 5).ok());
    EXPECT_TRUE(policy->AdmitPush(View(), 1, 9).ok()) << "a rank may skip";
    absl::Status again = policy->AdmitPush(View(), 1, 4);
    EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
    EXPECT_THAT(std::string(again.message()),
                HasSubstr("worker 1 already pushed step 4; got step 4 again"));
    EXPECT_FALSE(policy->ReplayTakesPart(View(), 1, 20));
    EXPECT_FALSE(policy->TakesPartWithoutPush(View(), 1, 21));
    EXPECT_EQ(policy->ResumeStep(View(), 1), 5u);
    EXPECT_EQ(policy->PlannedUpdates(100, 3), 300u);
    EXPECT_FALSE(policy->FastForwardsAfterRestore());
  }
}

}  // namespace
}  // namespace ps::server
