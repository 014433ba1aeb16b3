#include "worker/pipeline/schedule_action.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace ps::worker::pipeline {
namespace {

using A = ScheduleAction;

TEST(ScheduleKindTest, NamesRoundTripAsThePythonSideSpellsThem) {
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB}) {
    absl::StatusOr<ScheduleKind> parsed =
        ParseScheduleKind(ScheduleKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_STREQ(ScheduleKindName(ScheduleKind::kGpipe), "gpipe");
  EXPECT_STREQ(ScheduleKindName(ScheduleKind::kOneFOneB), "1f1b");
}

TEST(ScheduleKindTest, RefusesAnotherNameNamingTheFlag) {
  for (const char* name : {"", "GPipe", "interleaved"}) {
    absl::StatusOr<ScheduleKind> parsed = ParseScheduleKind(name);
    ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("--pipeline_schedule="),
              std::string::npos)
        << parsed.status();
  }
}

TEST(ScheduleActionTest, EndStagesSkipTheLinksTheyDoNotHave) {
  std::vector<A> first, middle, last;
  AppendForward(0, 3, 2, first);
  AppendBackward(0, 3, 2, first);
  EXPECT_EQ(first, (std::vector<A>{{A::kForward, 2},
                                   {A::kSendActivations, 2},
                                   {A::kReceiveGradients, 2},
                                   {A::kBackward, 2}}));
  AppendForward(1, 3, 0, middle);
  AppendBackward(1, 3, 0, middle);
  EXPECT_EQ(middle.size(), 6u);
  AppendForward(2, 3, 1, last);
  AppendBackward(2, 3, 1, last);
  EXPECT_EQ(last, (std::vector<A>{{A::kReceiveActivations, 1},
                                  {A::kForward, 1},
                                  {A::kBackward, 1},
                                  {A::kSendGradients, 1}}));
  EXPECT_EQ(A({A::kSendGradients, 4}).ToString(), "send gradients 4");
}

TEST(ScheduleActionTest, MaxInFlightCountsForwardsAwaitingTheirBackward) {
  EXPECT_EQ(MaxInFlight({}), 0);
  EXPECT_EQ(MaxInFlight({{A::kForward, 0},
                         {A::kForward, 1},
                         {A::kBackward, 0},
                         {A::kForward, 2},
                         {A::kBackward, 1},
                         {A::kBackward, 2}}),
            2);
  EXPECT_EQ(MaxInFlight({{A::kForward, 0},
                         {A::kBackward, 0},
                         {A::kForward, 1},
                         {A::kBackward, 1}}),
            1);
}

}  // namespace
}  // namespace ps::worker::pipeline
