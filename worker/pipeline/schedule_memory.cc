#include "worker/pipeline/schedule_memory.h"

#include <algorithm>
#include <vector>

#include "worker/pipeline/micro_batch_gradients.h"
#include "worker/pipeline/schedule_action.h"

namespace ps::worker::pipeline {

int64_t ScheduleHostBytes(const ScheduleOptions& options, int micro_rows,
                          int64_t input_size, int64_t output_size,
                          int64_t parameter_floats) {
  if (options.stages <= 1) return 0;
  const bool first = options.stage == 0;
  const bool last = options.stage + 1 == options.stages;
  const int m = std::max(1, options.micro_batches);
  // What StageSchedule::Run does with its buffers, action by action.
  int live_inputs = 0;
  int most_inputs = 0;
  int forwarded = -1;
  bool recomputes = false;
  std::vector<int> backwards;
  for (const ScheduleAction& action : StageActions(options, m)) {
    switch (action.op) {
      case ScheduleAction::kReceiveActivations:
        most_inputs = std::max(most_inputs, ++live_inputs);
        break;
      case ScheduleAction::kForward:
        forwarded = action.micro_batch;
        break;
      case ScheduleAction::kBackward:
        if (forwarded != action.micro_batch) recomputes = true;
        forwarded = -1;
        if (!first) --live_inputs;
        backwards.push_back(action.micro_batch);
        break;
      default:
        break;
    }
  }
  const int64_t in = int64_t{micro_rows} * input_size;
  const int64_t out = int64_t{micro_rows} * output_size;
  int64_t floats = parameter_floats;
  if (!first) floats += (most_inputs + 1) * in;
  if (!last) floats += (recomputes ? 3 : 2) * out;
  int64_t bytes = floats * static_cast<int64_t>(sizeof(float));
  if (m > 1) {
    // The tree's buffers for one float, in the schedule's backward order:
    // every parameter holds as many.
    MicroBatchGradients sums;
    sums.Start(std::vector<double>(m, 1.0 / m), 1);
    const float one = 1.0f;
    for (int i : backwards) {
      sums.Add(i, 0, absl::MakeConstSpan(&one, 1)).IgnoreError();
    }
    bytes += sums.held_bytes() * parameter_floats;
  }
  return bytes;
}

}  // namespace ps::worker::pipeline
