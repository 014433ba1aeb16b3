#include "worker/pipeline/gpipe_schedule.h"

#include <vector>

namespace ps::worker::pipeline {

std::vector<ScheduleAction> GpipeActions(int stage, int stages,
                                         int micro_batches) {
  std::vector<ScheduleAction> actions;
  for (int i = 0; i < micro_batches; ++i) {
    AppendForward(stage, stages, i, actions);
  }
  for (int i = micro_batches - 1; i >= 0; --i) {
    AppendBackward(stage, stages, i, actions);
  }
  return actions;
}

}  // namespace ps::worker::pipeline
