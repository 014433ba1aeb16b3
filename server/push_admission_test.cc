#include "server/push_admission.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/consistency_policy.h"
#include "server/coordinator_options.h"
#include "server/membership.h"

namespace ps::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1000);
constexpr absl::Duration kLease = absl::Seconds(10);

// A coordinator's state as AdmitPush sees it, for two ranks registered as
// incarnation 100 + rank.
class PushAdmissionTest : public ::testing::Test {
 protected:
  PushAdmissionTest() : members_(Options(), kStart) {
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(members_.Register(r, 100 + r, 0, 0, kStart).ok());
    }
  }

  static CoordinatorOptions Options() {
    CoordinatorOptions options;
    options.num_workers = 2;
    options.worker_timeout = kLease;
    return options;
  }

  // The push of `rank`'s batch of `num_examples` for `step`, its cursor
  // after `step + 1` such batches.
  static StagedPush Push(int rank, uint64_t step, uint32_t num_examples = 1) {
    StagedPush p;
    p.rank = rank;
    p.incarnation = 100 + rank;
    p.step = step;
    p.num_examples = num_examples;
    p.examples_done = (step + 1) * num_examples;
    return p;
  }

  absl::StatusOr<PushVerdict> Admit(
      const StagedPush& push, ConsistencyMode mode = ConsistencyMode::kSync,
      absl::Time now = kStart) {
    std::unique_ptr<ConsistencyPolicy> policy =
        ConsistencyPolicy::Create(mode, 0);
    return AdmitPush(
        push, *policy, members_,
        [this] {
          return StepView{version_, false, has_part_, members_.ranks()};
        },
        [this, &push] {
          ++hook_calls_;
          if (fast_forward_) version_ = push.step;
        },
        now);
  }

  Membership members_;
  uint64_t version_ = 0;
  std::vector<bool> has_part_ = std::vector<bool>(2, false);
  bool fast_forward_ = false;
  int hook_calls_ = 0;
};

TEST_F(PushAdmissionTest, AdmitsANewPushForTheStepBeingCollected) {
  absl::StatusOr<PushVerdict> verdict = Admit(Push(0, 0));
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_EQ(*verdict, PushVerdict::kNew);
  EXPECT_EQ(hook_calls_, 1);
  // Nothing is recorded: taking the push is the caller's.
  EXPECT_EQ(members_.ranks().next_step(0), 0u);
  EXPECT_EQ(*Admit(Push(0, 0)), PushVerdict::kNew);
}

TEST_F(PushAdmissionTest, RenewsThePushingRanksLease) {
  ASSERT_TRUE(
      Admit(Push(1, 0), ConsistencyMode::kSync, kStart + absl::Seconds(8))
          .ok());
  EXPECT_THAT(members_.ranks().LeasesRunOut(kStart + absl::Seconds(12)),
              ElementsAre(0));
}

TEST_F(PushAdmissionTest, RefusesAReplacedProcessAndAStoppedJob) {
  StagedPush old_process = Push(0, 0);
  old_process.incarnation = 7;
  EXPECT_EQ(Admit(old_process).status().code(),
            absl::StatusCode::kFailedPrecondition);
  members_.Shutdown();
  EXPECT_EQ(Admit(Push(0, 0)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(hook_calls_, 0);
}

TEST_F(PushAdmissionTest, RefusesAPushFromARankThatIsDone) {
  members_.ranks().MarkDone(1);
  absl::Status done = Admit(Push(1, 0)).status();
  EXPECT_EQ(done.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(done.message()),
              HasSubstr("worker 1 already said it is done; push for step 0"));
}

TEST_F(PushAdmissionTest, RefusesAStepBeyondThePlanAndTooManyExamples) {
  ASSERT_TRUE(members_.Register(0, 100, 5, 4, kStart).ok());
  absl::Status beyond = Admit(Push(0, 11)).status();
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(beyond.message()),
              HasSubstr("step 11 of worker 0 is beyond every step"));
  absl::Status heavy = Admit(Push(0, 0, 5)).status();
  EXPECT_EQ(heavy.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(heavy.message()), HasSubstr("num_examples 5"));
  // Checked before a replay is told apart.
  members_.ranks().RecordAccepted(0, 0, {0, 100});
  EXPECT_EQ(Admit(Push(0, 0, 5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(hook_calls_, 0);
}

TEST_F(PushAdmissionTest, AReplayIsToldApartBeforeThePolicyDecides) {
  members_.ranks().RecordAccepted(0, 0, {0, 1});
  // A step the policy would refuse as ahead: the batch is in already.
  EXPECT_EQ(*Admit(Push(0, 0)), PushVerdict::kReplay);
  EXPECT_EQ(*Admit(Push(0, 4, 0)), PushVerdict::kReplay);
  EXPECT_EQ(hook_calls_, 0);
}

TEST_F(PushAdmissionTest, TheHookMayMoveTheVersionBeforeThePolicyDecides) {
  absl::Status ahead = Admit(Push(0, 3)).status();
  EXPECT_EQ(ahead.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ahead.message()), HasSubstr("is ahead"));
  fast_forward_ = true;
  // The rank's first batch (its pushes of steps 0 to 2 were lost here).
  StagedPush first_batch = Push(0, 3);
  first_batch.examples_done = 1;
  EXPECT_EQ(*Admit(first_batch), PushVerdict::kNew);
  EXPECT_EQ(version_, 3u);
}

TEST_F(PushAdmissionTest, ThePolicyOfTheModeDecides) {
  has_part_[0] = true;
  EXPECT_EQ(Admit(Push(0, 0)).status().code(),
            absl::StatusCode::kAlreadyExists);
  members_.ranks().RecordAccepted(1, 4, {0, 5});
  StagedPush again = Push(1, 3);
  again.examples_done = 6;
  EXPECT_EQ(Admit(again, ConsistencyMode::kAsync).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*Admit(Push(1, 5), ConsistencyMode::kAsync), PushVerdict::kNew);
}

TEST_F(PushAdmissionTest, ANewPushMustFollowTheRanksDataProgress) {
  StagedPush skips = Push(0, 0);
  skips.examples_done = 3;
  absl::Status s = Admit(skips).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("examples_done 3"));
  EXPECT_EQ(hook_calls_, 1) << "checked after the policy";
}

}  // namespace
}  // namespace ps::server
