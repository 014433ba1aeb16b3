#ifndef PS_WORKER_PIPELINE_GPIPE_SCHEDULE_H_
#define PS_WORKER_PIPELINE_GPIPE_SCHEDULE_H_

#include <vector>

#include "worker/pipeline/schedule_action.h"

namespace ps::worker::pipeline {

// GPipe (Huang et al. 2019), stage `stage` of `stages`: every micro-batch
// forward, each output sent on as soon as it is made, then every
// micro-batch backward, last first (the last one's activations are still
// in the layers: it needs no recomputation), each input gradient sent
// back. A stage holds all `micro_batches` inputs at once.
std::vector<ScheduleAction> GpipeActions(int stage, int stages,
                                         int micro_batches);

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_GPIPE_SCHEDULE_H_
