#include "worker/pipeline/gpipe_schedule.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/pipeline/schedule_testing.h"

namespace ps::worker::pipeline {
namespace {

using A = ScheduleAction;

TEST(GpipeActionsTest, EveryForwardThenEveryBackwardLastFirst) {
  EXPECT_EQ(GpipeActions(1, 3, 2), (std::vector<A>{{A::kReceiveActivations, 0},
                                                   {A::kForward, 0},
                                                   {A::kSendActivations, 0},
                                                   {A::kReceiveActivations, 1},
                                                   {A::kForward, 1},
                                                   {A::kSendActivations, 1},
                                                   {A::kReceiveGradients, 1},
                                                   {A::kBackward, 1},
                                                   {A::kSendGradients, 1},
                                                   {A::kReceiveGradients, 0},
                                                   {A::kBackward, 0},
                                                   {A::kSendGradients, 0}}));
}

TEST(GpipeActionsTest, HoldsEveryMicroBatchAndNeverDeadlocks) {
  for (int stages = 1; stages <= 8; ++stages) {
    for (int m = 1; m <= 16; ++m) {
      SCOPED_TRACE(absl::StrCat(stages, " stages, ", m, " micro-batches"));
      std::vector<std::vector<A>> pipeline;
      for (int s = 0; s < stages; ++s) {
        pipeline.push_back(GpipeActions(s, stages, m));
        EXPECT_TRUE(
            testing::CheckStageActions(pipeline.back(), s, stages, m).ok())
            << testing::CheckStageActions(pipeline.back(), s, stages, m);
        EXPECT_EQ(MaxInFlight(pipeline.back()), m);
      }
      const absl::Status run = testing::SimulatePipeline(pipeline);
      EXPECT_TRUE(run.ok()) << run;
    }
  }
}

}  // namespace
}  // namespace ps::worker::pipeline
