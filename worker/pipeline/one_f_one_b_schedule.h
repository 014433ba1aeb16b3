#ifndef PS_WORKER_PIPELINE_ONE_F_ONE_B_SCHEDULE_H_
#define PS_WORKER_PIPELINE_ONE_F_ONE_B_SCHEDULE_H_

#include <vector>

#include "worker/pipeline/schedule_action.h"

namespace ps::worker::pipeline {

// 1F1B (PipeDream-Flush, Narayanan et al. 2021), stage `stage` of
// `stages`: w = min(stages - stage - 1, micro_batches) forwards to fill
// the pipeline, then one forward and one backward in turn, then the
// remaining backwards; micro-batches go forward and backward in order.
// Stage s so holds at most stages - s micro-batches' inputs (GPipe holds
// all of them) for the same bubble.
//
// In the steady part a stage receives the gradients of its oldest
// micro-batch before it sends its newest forward output: the next stage
// sends those gradients before it reads that output, and two sends facing
// each other would both block once the sockets' buffers are full.
std::vector<ScheduleAction> OneFOneBActions(int stage, int stages,
                                            int micro_batches);

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_ONE_F_ONE_B_SCHEDULE_H_
