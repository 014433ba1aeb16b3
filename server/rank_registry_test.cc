#include "server/rank_registry.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps::server {
namespace {

using ::ps::update::DataProgress;
using ::ps::update::RankRecord;

const absl::Time kStart = absl::FromUnixSeconds(1000);
const absl::Duration kLease = absl::Seconds(10);

// Declares dead every rank whose lease ran out, as a shard that hears from
// other ranks does (Membership decides when it may), and returns them.
std::vector<int> ExpireLeases(RankRegistry& ranks, absl::Time now) {
  std::vector<int> expired = ranks.LeasesRunOut(now);
  for (int rank : expired) ranks.MarkDead(rank);
  return expired;
}

TEST(RankRegistryTest, LeasesExpireOnlyForSilentRanksThatAreNotDone) {
  RankRegistry ranks(3, kLease, kStart);
  EXPECT_TRUE(ExpireLeases(ranks, kStart + kLease).empty());  // Not beyond.
  ranks.Touch(0, kStart + absl::Seconds(5));
  ranks.MarkDone(2);
  EXPECT_EQ(ExpireLeases(ranks, kStart + absl::Seconds(11)),
            std::vector<int>{1});
  EXPECT_TRUE(ranks.dead(1));
  EXPECT_FALSE(ranks.active(1));
  EXPECT_TRUE(ranks.active(0));
  EXPECT_FALSE(ranks.active(2));
  EXPECT_TRUE(ExpireLeases(ranks, kStart + absl::Seconds(12)).empty());
  EXPECT_EQ(ExpireLeases(ranks, kStart + absl::Seconds(16)),
            std::vector<int>{0});
  // Heard from again: live again, and Touch says it was dead.
  EXPECT_TRUE(ranks.Touch(1, kStart + absl::Seconds(20)));
  EXPECT_FALSE(ranks.Touch(1, kStart + absl::Seconds(21)));
  EXPECT_TRUE(ranks.active(1));
  EXPECT_EQ(ranks.SinceHeard(1, kStart + absl::Seconds(24)), absl::Seconds(3));
}

TEST(RankRegistryTest, LeasesRunOutListsWithoutDeclaringDead) {
  RankRegistry ranks(2, kLease, kStart);
  ranks.Touch(0, kStart + absl::Seconds(5));
  EXPECT_EQ(ranks.SinceHeard(0, kStart + absl::Seconds(6)), absl::Seconds(1));
  EXPECT_EQ(ranks.LeasesRunOut(kStart + absl::Seconds(11)),
            std::vector<int>{1});
  EXPECT_FALSE(ranks.dead(1)) << "only listed";
  ranks.MarkDead(1);
  EXPECT_TRUE(ranks.dead(1));
  EXPECT_EQ(ranks.LeasesRunOut(kStart + absl::Seconds(16)), std::vector<int>{0})
      << "a dead rank is not listed again";
}

TEST(RankRegistryTest, OnlyTheRegisteredIncarnationIsAccepted) {
  RankRegistry ranks(2, kLease, kStart);
  // Nothing is accepted from a rank before it registers.
  absl::Status unregistered = ranks.CheckIncarnation(0, 5);
  EXPECT_EQ(unregistered.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(unregistered.message(),
            "worker 0 has not registered with this server");
  EXPECT_EQ(ranks.SetIncarnation(0, 5), 0u);
  EXPECT_TRUE(ranks.CheckIncarnation(0, 5).ok());
  EXPECT_EQ(ranks.CheckIncarnation(0, 0).code(),
            absl::StatusCode::kInvalidArgument);  // Not given.
  absl::Status old = ranks.CheckIncarnation(0, 4);
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(old.message(),
            "request from incarnation 4 of worker 0, but incarnation 5 has "
            "registered since: this process was replaced by a restarted "
            "worker");
  // A restarted process that had finished before is not done any more.
  ranks.MarkDone(0);
  EXPECT_EQ(ranks.SetIncarnation(0, 5), 5u);
  EXPECT_TRUE(ranks.done(0));
  EXPECT_EQ(ranks.SetIncarnation(0, 6), 5u);
  EXPECT_FALSE(ranks.done(0));
}

TEST(RankRegistryTest, APushNotBeyondTheAcceptedProgressIsAReplay) {
  RankRegistry ranks(1, kLease, kStart);
  EXPECT_TRUE(ranks.IsReplay(0, {0, 0}));
  EXPECT_FALSE(ranks.IsReplay(0, {0, 32}));
  ranks.RecordAccepted(0, 3, {1, 64});
  EXPECT_EQ(ranks.next_step(0), 4u);
  for (DataProgress p :
       {DataProgress{1, 64}, DataProgress{1, 32}, DataProgress{0, 60000}}) {
    EXPECT_TRUE(ranks.IsReplay(0, p)) << p.epoch << ":" << p.examples_done;
  }
  EXPECT_FALSE(ranks.IsReplay(0, {1, 65}));
  EXPECT_FALSE(ranks.IsReplay(0, {2, 0}));
  // Progress and the next step never go back.
  ranks.RecordAccepted(0, 1, {0, 10});
  EXPECT_EQ(ranks.next_step(0), 4u);
  EXPECT_EQ(ranks.accepted(0), (DataProgress{1, 64}));
}

TEST(RankRegistryTest, ProgressMovesByAtMostTheBatchWithinOrIntoAnEpoch) {
  RankRegistry ranks(1, kLease, kStart);
  EXPECT_TRUE(ranks.CheckProgress(0, 0, {0, 32}, 32).ok());
  EXPECT_TRUE(ranks.CheckProgress(0, 0, {0, 20}, 32).ok());
  ranks.SetIncarnation(0, 7);  // A restarted worker resumes from the record.
  EXPECT_FALSE(ranks.CheckProgress(0, 0, {0, 6400}, 32).ok());
  const absl::Status ahead = ranks.CheckProgress(0, 0, {0, 33}, 32);
  EXPECT_EQ(ahead.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ahead.message().find("examples_done 33"), std::string::npos)
      << ahead;
  ranks.RecordAccepted(0, 0, {0, 32});
  EXPECT_TRUE(ranks.CheckProgress(0, 0, {0, 64}, 32).ok());
  EXPECT_TRUE(ranks.CheckProgress(0, 0, {0, 32}, 0).ok());   // An empty share.
  EXPECT_TRUE(ranks.CheckProgress(0, 0, {0, 10}, 10).ok());  // A replay.
  EXPECT_FALSE(ranks.CheckProgress(0, 0, {0, ~uint64_t{0}}, 32).ok());
  EXPECT_TRUE(ranks.CheckProgress(0, 0, {1, 32}, 32).ok());  // The next epoch.
  EXPECT_FALSE(ranks.CheckProgress(0, 0, {1, 64}, 32).ok());
  const absl::Status skips = ranks.CheckProgress(0, 0, {2, 32}, 32);
  EXPECT_NE(skips.message().find("skips epochs"), std::string::npos) << skips;

  // A restored record may be behind the worker, until its next push.
  ASSERT_TRUE(
      ranks.Restore({RankRecord{1, 1, {0, 32}, false}}, {}, kStart).ok());
  // By at most a batch and an epoch per step since its clock (1).
  const absl::Status far = ranks.CheckProgress(0, 1, {0, ~uint64_t{0}}, 32);
  EXPECT_EQ(far.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(far.message().find("1 x 32 examples past"), std::string::npos)
      << far;
  EXPECT_TRUE(ranks.CheckProgress(0, 1, {0, 64}, 32).ok());
  EXPECT_FALSE(ranks.CheckProgress(0, 1, {0, 65}, 32).ok());
  EXPECT_FALSE(ranks.CheckProgress(0, 1, {2, 0}, 32).ok());
  EXPECT_TRUE(ranks.CheckProgress(0, 12, {3, 320}, 32).ok());
  ranks.RecordAccepted(0, 12, {3, 320});
  EXPECT_FALSE(ranks.CheckProgress(0, 13, {3, 400}, 32).ok());
}

TEST(RankRegistryTest, APushMayCarryAtMostTheRanksRegisteredBatch) {
  RankRegistry ranks(2, kLease, kStart);
  EXPECT_TRUE(ranks.CheckExamples(0, ~uint32_t{0}).ok());  // No bound given.
  ranks.SetMaxExamples(0, 128);
  EXPECT_TRUE(ranks.CheckExamples(0, 128).ok());
  const absl::Status refused = ranks.CheckExamples(0, 129);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "num_examples 129 of worker 0 is more than its batch: it "
            "registered at most 128 examples a push (max_examples_per_push)");
  EXPECT_TRUE(ranks.CheckExamples(1, 129).ok());  // Another rank's bound.
  // A checkpoint keeps it: a restored shard hears no Register.
  RankRegistry restored(2, kLease, kStart);
  ASSERT_TRUE(restored.Restore(ranks.Records(), {}, kStart).ok());
  EXPECT_FALSE(restored.CheckExamples(0, 129).ok());
}

TEST(RankRegistryTest, RecordsKeepOnlyWhatReachedTheWeights) {
  RankRegistry ranks(2, kLease, kStart);
  ranks.SetIncarnation(1, 9);
  ranks.RecordAccepted(1, 0, {0, 32});
  ranks.RecordApplied(1, 0, {0, 32}, 32);
  ranks.RecordAccepted(1, 1, {0, 64});  // Waits for its step.
  const std::vector<RankRecord> records = ranks.Records();
  EXPECT_EQ(records[0], RankRecord());
  EXPECT_EQ(records[1], (RankRecord{9, 1, {0, 32}, false}));
  EXPECT_EQ(ranks.accepted(1), (DataProgress{0, 64}));
}

TEST(RankRegistryTest, CountsAppliedExamplesPerEpochSummedOverRanks) {
  RankRegistry ranks(2, kLease, kStart);
  EXPECT_EQ(ranks.ExamplesPerEpochLine(), "examples per epoch:");
  ranks.RecordApplied(0, 0, {0, 30}, 30);
  ranks.RecordApplied(1, 0, {0, 30}, 30);
  ranks.RecordApplied(1, 1, {2, 5}, 5);
  ranks.RecordApplied(0, 1, {1, 0}, 0);  // An empty share counts nothing.
  EXPECT_EQ(ranks.ExamplesPerEpochLine(), "examples per epoch: 0=60 2=5");
  EXPECT_EQ(ranks.examples().at(2), (std::vector<uint64_t>{0, 5}));
}

TEST(RankRegistryTest, JobIsFinishedWhenEveryRankIsDoneOrDead) {
  RankRegistry ranks(2, kLease, kStart);
  const absl::Time later = kStart + absl::Seconds(100);
  const absl::Duration grace = absl::Seconds(5);
  EXPECT_FALSE(ranks.AllFinished(later, grace));
  ExpireLeases(ranks, kStart + absl::Seconds(11));
  EXPECT_FALSE(ranks.AllFinished(later, grace)) << "all dead, none done";
  ranks.MarkDone(0);
  EXPECT_TRUE(ranks.AllFinished(later, grace));
  ranks.Touch(1, kStart + absl::Seconds(12));
  EXPECT_FALSE(ranks.AllFinished(later, grace));
  ranks.MarkDone(1);
  EXPECT_TRUE(ranks.AllFinished(later, grace));
  EXPECT_EQ(ranks.RanksReport().substr(0, 24), "workers: 0=done 1=done\nw");
}

TEST(RankRegistryTest, DeadRankHoldsTheJobOpenForItsRejoinGrace) {
  RankRegistry ranks(2, kLease, kStart);
  ranks.MarkDone(0);
  ExpireLeases(ranks, kStart + kLease + absl::Seconds(1));
  const absl::Duration grace = absl::Seconds(30);
  // Rank 1 was last heard at kStart: dead, but it may still be restarted.
  EXPECT_FALSE(ranks.AllFinished(kStart + kLease + absl::Seconds(29), grace));
  EXPECT_TRUE(ranks.AllFinished(kStart + kLease + grace, grace));
}

TEST(RankRegistryTest, StillTrainingLeavesOutDoneFinishingAndGoneRanks) {
  RankRegistry ranks(4, kLease, kStart);
  const absl::Duration grace = absl::Seconds(30);
  EXPECT_EQ(ranks.StillTraining(0, kStart, grace), (std::vector<int>{1, 2, 3}));
  ranks.MarkDone(1);
  ranks.MarkFinishing(2);
  EXPECT_FALSE(ranks.active(2)) << "a finishing rank takes no more steps";
  EXPECT_EQ(ranks.StillTraining(0, kStart, grace), std::vector<int>{3});
  // Rank 3 dies; it still counts until its lease plus the grace are over.
  ranks.Touch(0, kStart + kLease);
  ranks.Touch(2, kStart + kLease);
  ExpireLeases(ranks, kStart + kLease + absl::Seconds(1));
  EXPECT_EQ(ranks.StillTraining(0, kStart + kLease + absl::Seconds(29), grace),
            std::vector<int>{3});
  EXPECT_TRUE(ranks.StillTraining(0, kStart + kLease + grace, grace).empty());
  // Restarted, it trains again, and so does a finishing rank restarted.
  ranks.SetIncarnation(3, 7);
  ranks.SetIncarnation(3, 8);
  ranks.Touch(3, kStart + kLease + grace);
  ranks.SetIncarnation(2, 5);
  ranks.SetIncarnation(2, 6);
  EXPECT_EQ(ranks.StillTraining(0, kStart + kLease + grace, grace),
            (std::vector<int>{2, 3}));
}

TEST(RankRegistryTest, TheSspMinimumCountsOnlyActiveRanks) {
  RankRegistry ranks(3, kLease, kStart);
  ranks.RecordAccepted(0, 4, {0, 5});
  ranks.RaiseNextStep(2, 2);
  EXPECT_EQ(ranks.ActiveBefore(3), (std::vector<int>{1, 2}));
  ranks.MarkDone(1);
  EXPECT_EQ(ranks.ActiveBefore(3), std::vector<int>{2});
  ranks.Touch(0, kStart + absl::Seconds(5));
  ExpireLeases(ranks, kStart + absl::Seconds(11));
  EXPECT_TRUE(ranks.ActiveBefore(3).empty());
}

TEST(RankRegistryTest, RestoreReplacesStateAndRestartsLeases) {
  RankRegistry ranks(2, kLease, kStart);
  ExpireLeases(ranks, kStart + absl::Seconds(11));
  const std::vector<RankRecord> records = {{3, 5, {1, 10}, false},
                                           {4, 6, {1, 20}, true}};
  const update::ExampleCounts examples = {{1, {10, 20}}};
  const absl::Time later = kStart + absl::Seconds(100);
  ASSERT_TRUE(ranks.Restore(records, examples, later).ok());
  EXPECT_EQ(ranks.Records(), records);
  EXPECT_EQ(ranks.next_step(0), 5u);
  EXPECT_EQ(ranks.accepted(1), (DataProgress{1, 20}));
  EXPECT_TRUE(ranks.active(0));
  EXPECT_TRUE(ExpireLeases(ranks, later + kLease).empty());
  EXPECT_EQ(ranks.ExamplesPerEpochLine(), "examples per epoch: 1=30");

  EXPECT_EQ(ranks.Restore({records[0]}, examples, later).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ranks.Restore(records, {{0, {1}}}, later).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ranks.Records(), records);
}

}  // namespace
}  // namespace ps::server
