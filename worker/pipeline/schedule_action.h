#ifndef PS_WORKER_PIPELINE_SCHEDULE_ACTION_H_
#define PS_WORKER_PIPELINE_SCHEDULE_ACTION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ps::worker::pipeline {

// The pipeline schedules our worker runs (--pipeline_schedule), named as
// paramserver.torch.pipeline names them.
enum class ScheduleKind {
  kGpipe,     // "gpipe": gpipe_schedule.h.
  kOneFOneB,  // "1f1b": one_f_one_b_schedule.h.
};

// "gpipe" or "1f1b".
const char* ScheduleKindName(ScheduleKind kind);

// InvalidArgument naming --pipeline_schedule for any other name.
absl::StatusOr<ScheduleKind> ParseScheduleKind(absl::string_view name);

// One thing a stage does with one micro-batch. A schedule is a stage's
// ordered list of them for one step: what both schedules share, and what
// StageSchedule (stage_schedule.h) runs. Receives and sends are actions of
// their own because their order between neighbours decides whether the
// pipeline can deadlock: a send blocks until the neighbour reads, once the
// socket's buffer is full.
struct ScheduleAction {
  enum Op {
    kReceiveActivations,  // From the previous stage.
    kForward,
    kSendActivations,   // The last kForward's output, to the next stage.
    kReceiveGradients,  // d(loss)/d(output), from the next stage.
    kBackward,          // Recomputing the forward first if needed.
    kSendGradients,     // d(loss)/d(input), to the previous stage.
  };
  Op op = kForward;
  int micro_batch = 0;

  bool operator==(const ScheduleAction& o) const {
    return op == o.op && micro_batch == o.micro_batch;
  }
  std::string ToString() const;  // "forward 3"
};

// The most micro-batches a stage running `actions` holds between a
// kForward and its kBackward: the inputs (activations) it keeps.
int MaxInFlight(absl::Span<const ScheduleAction> actions);

// Appends what stage `stage` of `stages` does for one micro-batch's
// forward (receive, forward, send) or backward (receive, backward, send):
// the first stage receives no activations and sends no gradients, the last
// sends no activations and receives no gradients.
void AppendForward(int stage, int stages, int micro_batch,
                   std::vector<ScheduleAction>& out);
void AppendBackward(int stage, int stages, int micro_batch,
                    std::vector<ScheduleAction>& out);

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_SCHEDULE_ACTION_H_
