#include "worker/pipeline/one_f_one_b_schedule.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/pipeline/gpipe_schedule.h"
#include "worker/pipeline/schedule_testing.h"

namespace ps::worker::pipeline {
namespace {

using A = ScheduleAction;

std::vector<std::vector<A>> Pipeline(int stages, int m) {
  std::vector<std::vector<A>> pipeline;
  for (int s = 0; s < stages; ++s) {
    pipeline.push_back(OneFOneBActions(s, stages, m));
  }
  return pipeline;
}

TEST(OneFOneBActionsTest, FillsThenAlternatesThenDrains) {
  // Stage 0 of 2: one forward to fill, then forward 1 with backward 0,
  // forward 2 with backward 1, then backward 2.
  EXPECT_EQ(OneFOneBActions(0, 2, 3), (std::vector<A>{{A::kForward, 0},
                                                      {A::kSendActivations, 0},
                                                      {A::kForward, 1},
                                                      {A::kReceiveGradients, 0},
                                                      {A::kSendActivations, 1},
                                                      {A::kBackward, 0},
                                                      {A::kForward, 2},
                                                      {A::kReceiveGradients, 1},
                                                      {A::kSendActivations, 2},
                                                      {A::kBackward, 1},
                                                      {A::kReceiveGradients, 2},
                                                      {A::kBackward, 2}}));
  // The last stage runs each micro-batch's backward right after its forward.
  EXPECT_EQ(OneFOneBActions(1, 2, 2),
            (std::vector<A>{{A::kReceiveActivations, 0},
                            {A::kForward, 0},
                            {A::kBackward, 0},
                            {A::kSendGradients, 0},
                            {A::kReceiveActivations, 1},
                            {A::kForward, 1},
                            {A::kBackward, 1},
                            {A::kSendGradients, 1}}));
}

TEST(OneFOneBActionsTest, StageSHoldsAtMostKMinusSAndNeverDeadlocks) {
  for (int stages = 1; stages <= 8; ++stages) {
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE(absl::StrCat(stages, " stages, ", m, " micro-batches"));
      const std::vector<std::vector<A>> pipeline = Pipeline(stages, m);
      for (int s = 0; s < stages; ++s) {
        const absl::Status valid =
            testing::CheckStageActions(pipeline[s], s, stages, m);
        EXPECT_TRUE(valid.ok()) << valid;
        EXPECT_EQ(MaxInFlight(pipeline[s]), std::min(stages - s, m))
            << "stage " << s;
      }
      const absl::Status run = testing::SimulatePipeline(pipeline);
      EXPECT_TRUE(run.ok()) << run;
    }
  }
}

// The simulation can fail: sending the newest output before receiving the
// oldest gradients, as a naive 1F1B does, deadlocks blocking sockets.
TEST(OneFOneBActionsTest, SendingBeforeReceivingWouldDeadlock) {
  std::vector<std::vector<A>> pipeline = Pipeline(2, 4);
  std::vector<A>& first = pipeline[0];
  for (size_t n = 0; n + 1 < first.size(); ++n) {
    if (first[n].op == A::kReceiveGradients &&
        first[n + 1].op == A::kSendActivations) {
      std::swap(first[n], first[n + 1]);
    }
  }
  EXPECT_TRUE(testing::CheckStageActions(first, 0, 2, 4).ok());
  const absl::Status run = testing::SimulatePipeline(pipeline);
  EXPECT_EQ(run.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(run.message().find("deadlock"), std::string::npos) << run;
}

// Neighbours must agree on the order: a GPipe stage beside a 1F1B one is
// caught at the first message it gets out of turn.
TEST(OneFOneBActionsTest, NeighboursOfAnotherScheduleDisagree) {
  std::vector<std::vector<A>> pipeline = Pipeline(2, 3);
  pipeline[1] = GpipeActions(1, 2, 3);
  const absl::Status run = testing::SimulatePipeline(pipeline);
  EXPECT_EQ(run.code(), absl::StatusCode::kFailedPrecondition) << run;
}

}  // namespace
}  // namespace ps::worker::pipeline
