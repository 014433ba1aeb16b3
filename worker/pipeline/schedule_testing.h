#ifndef PS_WORKER_PIPELINE_SCHEDULE_TESTING_H_
#define PS_WORKER_PIPELINE_SCHEDULE_TESTING_H_

#include <vector>

#include "absl/status/status.h"
#include "worker/pipeline/schedule_action.h"

namespace ps::worker::pipeline::testing {

// Checks one stage's actions for a step of `micro_batches` (FailedPrecondition
// naming the first fault): every micro-batch forward once and backward once,
// after its forward; its activations received before its forward and
// gradients before its backward (on the stages that have them); a
// forward's output sent before the next forward or backward replaces it;
// no receive or send the stage has no neighbour for.
absl::Status CheckStageActions(const std::vector<ScheduleAction>& actions,
                               int stage, int stages, int micro_batches);

// Runs every stage's actions (`pipeline[s]` for stage s) against each other
// as the links would, with the strictest sockets: a send completes only when
// the neighbour receives it. FailedPrecondition when a receive gets another
// micro-batch than it names (the neighbours' orders differ) or when no
// stage can move (a deadlock), naming where each stage waits.
absl::Status SimulatePipeline(
    const std::vector<std::vector<ScheduleAction>>& pipeline);

}  // namespace ps::worker::pipeline::testing

#endif  // PS_WORKER_PIPELINE_SCHEDULE_TESTING_H_
