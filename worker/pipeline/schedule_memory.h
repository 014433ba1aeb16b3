#ifndef PS_WORKER_PIPELINE_SCHEDULE_MEMORY_H_
#define PS_WORKER_PIPELINE_SCHEDULE_MEMORY_H_

#include <cstdint>

#include "worker/pipeline/stage_schedule.h"

namespace ps::worker::pipeline {

// The bytes of host buffers a StageSchedule of `options` keeps once it ran
// a step of micro-batches of `micro_rows` rows (StageSchedule::host_bytes),
// for a stage of `input_size` floats in and `output_size` out per example
// and `parameter_floats` parameters. Found by walking the schedule's
// actions (StageActions), not from a formula per schedule:
//   - not the first stage: the micro-batches' inputs it holds at once (M
//     under GPipe, at most K - s under 1F1B; reused), and the gradient it
//     sends back;
//   - not the last stage: its output, the gradient it receives and, where
//     the schedule recomputes a forward before its backward, the
//     recomputed output;
//   - the step's gradient of every parameter, in float; with M > 1 also
//     the double partial sums (MicroBatchGradients: the most its tree holds
//     at once in the schedule's backward order, about log2(M) + 1 per
//     parameter). With M = 1 there are none (StageSchedule keeps the one
//     micro-batch's gradients as they come).
// 0 for an unsplit worker (options.stages 1), which runs no schedule. Not
// counted: a few words per micro-batch (rows, offsets, losses).
int64_t ScheduleHostBytes(const ScheduleOptions& options, int micro_rows,
                          int64_t input_size, int64_t output_size,
                          int64_t parameter_floats);

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_SCHEDULE_MEMORY_H_
