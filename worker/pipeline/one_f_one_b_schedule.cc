#include "worker/pipeline/one_f_one_b_schedule.h"

#include <algorithm>
#include <vector>

namespace ps::worker::pipeline {

std::vector<ScheduleAction> OneFOneBActions(int stage, int stages,
                                            int micro_batches) {
  const int warmup = std::min(stages - stage - 1, micro_batches);
  const bool last = stage + 1 == stages;
  std::vector<ScheduleAction> actions;
  for (int i = 0; i < warmup; ++i) AppendForward(stage, stages, i, actions);
  for (int i = 0; i + warmup < micro_batches; ++i) {
    const int newest = i + warmup;
    if (stage > 0) {
      actions.push_back({ScheduleAction::kReceiveActivations, newest});
    }
    actions.push_back({ScheduleAction::kForward, newest});
    if (!last) {
      actions.push_back({ScheduleAction::kReceiveGradients, i});
      actions.push_back({ScheduleAction::kSendActivations, newest});
    }
    actions.push_back({ScheduleAction::kBackward, i});
    if (stage > 0) actions.push_back({ScheduleAction::kSendGradients, i});
  }
  for (int i = std::max(0, micro_batches - warmup); i < micro_batches; ++i) {
    AppendBackward(stage, stages, i, actions);
  }
  return actions;
}

}  // namespace ps::worker::pipeline
