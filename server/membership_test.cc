#include "server/membership.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator_options.h"
#include "update/lr_schedule.h"

namespace ps::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kStart = absl::FromUnixSeconds(1000);
constexpr absl::Duration kLease = absl::Seconds(10);
constexpr absl::Duration kGrace = absl::Seconds(60);

CoordinatorOptions Options(int num_workers) {
  CoordinatorOptions options;
  options.num_workers = num_workers;
  options.worker_timeout = kLease;
  options.rejoin_grace = kGrace;
  return options;
}

// Registers ranks [0, n) as incarnation 100 + rank, planning `planned`.
void RegisterAll(Membership& members, int n, uint64_t planned = 0) {
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(members.Register(r, 100 + r, planned, 0, kStart).ok());
  }
}

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// `rank` (incarnation 100 + rank) heartbeats every 2 s, less than half the
// lease, as a live worker does, from `from` to `to`.
void Heartbeats(Membership& members, int rank, absl::Time from, absl::Time to) {
  for (absl::Time t = from; t <= to; t += absl::Seconds(2)) {
    ASSERT_TRUE(members.Admit(rank, 100 + rank, t).ok()) << rank;
  }
}

absl::Time At(int seconds) { return kStart + absl::Seconds(seconds); }

TEST(MembershipTest, AdmitsTheRegisteredIncarnationOnly) {
  Membership members(Options(2), kStart);
  EXPECT_EQ(members.Admit(0, 100, kStart).code(),
            absl::StatusCode::kFailedPrecondition)
      << "not registered";
  RegisterAll(members, 2);
  EXPECT_TRUE(members.Admit(0, 100, kStart).ok());
  EXPECT_TRUE(members.CheckRegistered(0, 100).ok());

  ASSERT_TRUE(members.Register(0, 200, 0, 0, kStart).ok());
  absl::Status replaced = members.Admit(0, 100, kStart);
  EXPECT_EQ(replaced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(replaced), HasSubstr("this process was replaced"));
  EXPECT_THAT(Message(members.CheckRegistered(0, 100)),
              HasSubstr("worker 0 registered as incarnation 200, not 100"));
}

TEST(MembershipTest, AnAdmittedRequestRenewsTheLease) {
  Membership members(Options(2), kStart);
  RegisterAll(members, 2);
  Heartbeats(members, 1, At(2), At(12));
  EXPECT_THAT(members.ExpireLeases(kStart + absl::Seconds(12)), ElementsAre(0));
  EXPECT_TRUE(members.failure().ok()) << "elastic: the job goes on";
  // Heard from again: live again.
  ASSERT_TRUE(members.Admit(0, 100, kStart + absl::Seconds(13)).ok());
  EXPECT_TRUE(members.ranks().active(0));
}

TEST(MembershipTest, AShardThatHearsFromNoWorkerDeclaresNoneDead) {
  CoordinatorOptions options = Options(2);
  options.on_worker_failure = FailurePolicy::kFail;
  Membership members(options, kStart);
  RegisterAll(members, 2);
  // Cut off: neither rank is heard from, for as long as it lasts.
  EXPECT_THAT(members.ExpireLeases(kStart + 5 * kLease), IsEmpty());
  EXPECT_THAT(members.unheard(), ElementsAre(0, 1));
  EXPECT_TRUE(members.failure().ok()) << members.failure();
  EXPECT_TRUE(members.ranks().active(0));
  EXPECT_TRUE(members.ranks().active(1));
  // Plugged back in: both are heard from, and nobody was dead.
  ASSERT_TRUE(members.Admit(1, 101, kStart + 5 * kLease).ok());
  ASSERT_TRUE(members.Admit(0, 100, kStart + 5 * kLease).ok());
  EXPECT_THAT(members.ExpireLeases(kStart + 5 * kLease + absl::Seconds(1)),
              IsEmpty());
  EXPECT_THAT(members.unheard(), IsEmpty());
  EXPECT_TRUE(members.Running().ok());
}

TEST(MembershipTest, HearingAgainTheSilentGetAsLongAsTheCutToComeBack) {
  Membership members(Options(2), kStart);
  RegisterAll(members, 2);
  Heartbeats(members, 0, At(2), At(20));
  Heartbeats(members, 1, At(2), At(20));
  // Cut off from 20 s to 40 s.
  EXPECT_THAT(members.ExpireLeases(At(39)), IsEmpty());
  EXPECT_THAT(members.unheard(), ElementsAre(0, 1));
  // Rank 1's connection comes back first; rank 0's TCP retries back off
  // as long as the cut, 20 s, and it gets twice that from 40 s.
  Heartbeats(members, 1, At(40), At(79));
  EXPECT_THAT(members.ExpireLeases(At(79)), IsEmpty());
  EXPECT_THAT(members.unheard(), ElementsAre(0));
  Heartbeats(members, 1, At(80), At(80));
  EXPECT_THAT(members.ExpireLeases(At(80)), ElementsAre(0));
  EXPECT_THAT(members.unheard(), IsEmpty());
  EXPECT_TRUE(members.ranks().dead(0));
}

TEST(MembershipTest, RanksFallingSilentTogetherAreNotDeclaredOneByOne) {
  Membership members(Options(3), kStart);
  RegisterAll(members, 3);
  // Their last requests before the cut came within half a lease.
  ASSERT_TRUE(members.Admit(1, 101, At(1)).ok());
  ASSERT_TRUE(members.Admit(2, 102, At(4)).ok());
  // Rank 0's lease runs out first, while the others' have not.
  EXPECT_THAT(members.ExpireLeases(At(11)), IsEmpty());
  EXPECT_THAT(members.unheard(), ElementsAre(0));
  EXPECT_THAT(members.ExpireLeases(At(15)), IsEmpty());
  EXPECT_THAT(members.unheard(), ElementsAre(0, 1, 2));
}

TEST(MembershipTest, AWaitingCallIsNoRequest) {
  Membership members(Options(2), kStart);
  RegisterAll(members, 2);
  // Rank 0's call waits across a cut: its lease is renewed, but the shard
  // heard nothing from the network.
  members.ranks().Touch(0, At(10));
  EXPECT_THAT(members.ExpireLeases(At(11)), IsEmpty());
  EXPECT_THAT(members.unheard(), ElementsAre(1));
  // Its heartbeats arrive from 11 s: rank 1 gets twice the 11 s deaf spell.
  Heartbeats(members, 0, At(11), At(31));
  EXPECT_THAT(members.ExpireLeases(At(31)), IsEmpty());
  Heartbeats(members, 0, At(33), At(33));
  EXPECT_THAT(members.ExpireLeases(At(33)), ElementsAre(1));
}

TEST(MembershipTest, TheLastRankTrainingDiesOnItsLeaseAlone) {
  Membership members(Options(3), kStart);
  RegisterAll(members, 3);
  members.ranks().MarkDone(0);
  members.ranks().MarkDead(1);
  // Nobody is left who could witness for rank 2.
  EXPECT_THAT(members.ExpireLeases(kStart + kLease + absl::Seconds(1)),
              ElementsAre(2));
  EXPECT_THAT(members.unheard(), IsEmpty());
}

TEST(MembershipTest, RefusesEverythingAfterShutdownAndAfterAFailure) {
  CoordinatorOptions options = Options(2);
  options.on_worker_failure = FailurePolicy::kFail;
  Membership members(options, kStart);
  RegisterAll(members, 2);
  Heartbeats(members, 1, At(2), At(12));
  EXPECT_THAT(members.ExpireLeases(kStart + absl::Seconds(12)), ElementsAre(0));
  const absl::Status failure = members.failure();
  EXPECT_EQ(failure.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(failure),
            "worker 0 is dead (no heartbeat for 10s); --on_worker_failure=fail "
            "stops the job");
  EXPECT_EQ(members.Running(), failure);
  EXPECT_EQ(members.Admit(1, 101, kStart), failure);
  EXPECT_EQ(members.Register(1, 101, 0, 0, kStart).status(), failure);
  EXPECT_THAT(members.ExpireLeases(kStart + absl::Hours(1)), IsEmpty())
      << "a failed job declares no one dead";

  members.Shutdown();
  EXPECT_TRUE(members.shut_down());
  EXPECT_EQ(members.Running().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(members.Admit(1, 101, kStart).code(),
            absl::StatusCode::kUnavailable);
}

TEST(MembershipTest, EveryWorkerMustPlanTheSameNumberOfSteps) {
  Membership members(Options(3), kStart);
  ASSERT_TRUE(members.Register(0, 100, 100, 0, kStart).ok());
  absl::StatusOr<Membership::Registration> other =
      members.Register(1, 101, 120, 0, kStart);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(other.status()),
              HasSubstr("worker 1 plans 120 steps but the workers registered "
                        "before it plan 100"));
  EXPECT_EQ(members.ranks().incarnation(1), 0u) << "nothing changes";
  EXPECT_TRUE(members.Register(1, 101, 100, 0, kStart).ok());
  EXPECT_TRUE(members.Register(2, 102, 0, 0, kStart).ok())
      << "a worker that does not say keeps the plan";
  EXPECT_EQ(members.planned_steps(), 100u);
}

TEST(MembershipTest, ACosineScheduleNeedsAPlan) {
  CoordinatorOptions options = Options(1);
  options.lr_schedule = *update::LearningRateSchedule::Create(
      update::LrScheduleKind::kCosine, 0.1f, 0.0f);
  Membership members(options, kStart);
  absl::StatusOr<Membership::Registration> unplanned =
      members.Register(0, 100, 0, 0, kStart);
  EXPECT_EQ(unplanned.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(unplanned.status()),
              HasSubstr("--lr_schedule=cosine needs the planned number of "
                        "steps, and worker 0 registered with planned_steps 0"));
  EXPECT_TRUE(members.Register(0, 100, 50, 0, kStart).ok());
}

TEST(MembershipTest, RegisterTellsTheIncarnationItReplaces) {
  Membership members(Options(1), kStart);
  absl::StatusOr<Membership::Registration> first =
      members.Register(0, 100, 0, 8, kStart);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->previous_incarnation, 0u);
  EXPECT_FALSE(first->extension_join);
  absl::StatusOr<Membership::Registration> restarted =
      members.Register(0, 200, 0, 8, kStart);
  ASSERT_TRUE(restarted.ok());
  EXPECT_EQ(restarted->previous_incarnation, 100u);
  EXPECT_EQ(members.ranks().CheckExamples(0, 9).code(),
            absl::StatusCode::kInvalidArgument)
      << "the bound it registered";
}

TEST(MembershipTest, ARestoredRunKeepsItsPlan) {
  Membership members(Options(2), kStart);
  members.Restore(RankRegistry(2, kLease, kStart), 100);
  absl::StatusOr<Membership::Registration> other =
      members.Register(0, 100, 120, 0, kStart);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(other.status()),
              HasSubstr("worker 0 plans 120 steps but the run of the restored "
                        "checkpoint planned 100"));
  EXPECT_TRUE(members.Register(0, 100, 100, 0, kStart).ok());
}

TEST(MembershipTest, AnExtendedRunTakesTheFirstPlanItsWorkersRegister) {
  CoordinatorOptions options = Options(2);
  options.replan_after_restore = true;
  Membership members(options, kStart);
  RankRegistry restored(2, kLease, kStart);
  restored.SetIncarnation(0, 100);
  restored.SetIncarnation(1, 101);
  members.Restore(std::move(restored), 100);

  absl::StatusOr<Membership::Registration> first =
      members.Register(0, 200, 150, 0, kStart);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->previous_incarnation, 100u);
  EXPECT_TRUE(first->extension_join);
  EXPECT_EQ(members.planned_steps(), 150u);
  // The new plan holds for the others.
  EXPECT_EQ(members.Register(1, 201, 100, 0, kStart).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Membership::Registration> second =
      members.Register(1, 201, 150, 0, kStart);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->extension_join);
  // A later registration of the same rank is a restart again.
  EXPECT_FALSE(members.Register(1, 301, 150, 0, kStart)->extension_join);
}

TEST(MembershipTest, BoundsStepsByThePlan) {
  Membership members(Options(3), kStart);
  EXPECT_TRUE(members.CheckWithinPlan(1, "step", 1u << 30).ok())
      << "no plan yet";
  RegisterAll(members, 3, 10);
  EXPECT_TRUE(members.CheckWithinPlan(1, "step", 30).ok());
  absl::Status beyond = members.CheckWithinPlan(1, "clock", 31);
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(beyond),
              HasSubstr("clock 31 of worker 1 is beyond every step of this "
                        "job (3 workers x 10 planned steps)"));

  Membership huge(Options(3), kStart);
  RegisterAll(huge, 3, std::numeric_limits<uint64_t>::max() / 2);
  EXPECT_TRUE(huge.CheckWithinPlan(0, "step", ~uint64_t{0}).ok())
      << "a bound that overflows bounds nothing";
}

TEST(MembershipTest, TheJobEndsOnceWhenEveryRankIsDone) {
  Membership members(Options(2), kStart);
  RegisterAll(members, 2);
  members.ranks().MarkDone(0);
  EXPECT_EQ(members.EndIfOver(kStart), std::nullopt);
  EXPECT_FALSE(members.finished());
  members.ranks().MarkDone(1);
  EXPECT_EQ(members.EndIfOver(kStart), absl::OkStatus());
  EXPECT_TRUE(members.finished());
  EXPECT_EQ(members.EndIfOver(kStart), std::nullopt) << "only once";
}

TEST(MembershipTest, ADeadRankHoldsTheJobOpenForItsGrace) {
  Membership members(Options(2), kStart);
  RegisterAll(members, 2);
  members.ranks().MarkDone(0);
  const absl::Time expired = kStart + kLease + absl::Seconds(1);
  ASSERT_THAT(members.ExpireLeases(expired), ElementsAre(1));
  EXPECT_EQ(members.EndIfOver(expired), std::nullopt);
  EXPECT_THAT(members.OthersTraining(0, expired), ElementsAre(1));
  const absl::Time gone = kStart + kLease + kGrace;
  EXPECT_THAT(members.OthersTraining(0, gone), IsEmpty());
  EXPECT_EQ(members.EndIfOver(gone), absl::OkStatus());
}

TEST(MembershipTest, AFailedJobEndsWithItsFailure) {
  CoordinatorOptions options = Options(2);
  options.on_worker_failure = FailurePolicy::kFail;
  Membership members(options, kStart);
  RegisterAll(members, 2);
  Heartbeats(members, 0, At(2), At(12));
  ASSERT_THAT(members.ExpireLeases(kStart + absl::Seconds(12)), ElementsAre(1));
  std::optional<absl::Status> outcome = members.EndIfOver(kStart);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MembershipTest, OthersTrainingLeavesOutFinishingAndDoneRanks) {
  Membership members(Options(4), kStart);
  RegisterAll(members, 4);
  members.ranks().MarkFinishing(1);
  members.ranks().MarkDone(2);
  EXPECT_THAT(members.OthersTraining(0, kStart), ElementsAre(3));
  EXPECT_THAT(members.OthersTraining(3, kStart), ElementsAre(0));
}

TEST(MembershipTest, ABarrierWaitsForTheActiveRanksBehindIt) {
  Membership members(Options(3), kStart);
  RegisterAll(members, 3);
  members.ReachBarrier(0, 2);
  EXPECT_THAT(members.BehindBarrier(1), ElementsAre(1, 2));
  members.ReachBarrier(1, 1);
  EXPECT_THAT(members.BehindBarrier(1), ElementsAre(2));
  EXPECT_THAT(members.BehindBarrier(2), ElementsAre(1, 2));
  members.ReachBarrier(0, 1);  // A generation is never lowered.
  EXPECT_THAT(members.BehindBarrier(2), ElementsAre(1, 2));
  members.ranks().MarkDone(2);
  EXPECT_THAT(members.BehindBarrier(1), IsEmpty());
}

}  // namespace
}  // namespace ps::server
