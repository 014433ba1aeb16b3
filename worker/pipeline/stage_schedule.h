#ifndef PS_WORKER_PIPELINE_STAGE_SCHEDULE_H_
#define PS_WORKER_PIPELINE_STAGE_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/nn/stage_model.h"
#include "worker/pipeline/micro_batch_gradients.h"
#include "worker/pipeline/schedule_action.h"
#include "worker/pipeline/stage_link.h"

namespace ps::worker::pipeline {

// One replica's batch of one step, as a stage sees it.
struct StepBatch {
  uint64_t step = 0;
  // Rows of the replica's batch, at least 1.
  int rows = 0;
  // Where the batch starts in the step's global batch (dropout masks).
  uint64_t first_example = 0;
  // The first stage's input, rows * example floats; empty elsewhere.
  absl::Span<const float> images;
  // The last stage's labels, rows of them; empty elsewhere.
  absl::Span<const float> labels;
};

// The rows of each of `micro_batches` micro-batches of a batch of `rows`:
// as even as can be, the first ones one larger, none empty (fewer
// micro-batches when rows < micro_batches). Every stage computes the same.
std::vector<int> MicroBatchRows(int rows, int micro_batches);

// Where a stage stands and which schedule it runs; every stage of a
// replica must be given the same kind and micro_batches.
struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::kGpipe;
  int stage = 0;
  int stages = 1;
  int micro_batches = 1;
};

// The actions of `options.kind` (GpipeActions or OneFOneBActions) for a
// step of `micro_batches` micro-batches.
std::vector<ScheduleAction> StageActions(const ScheduleOptions& options,
                                         int micro_batches);

// Runs a stage's schedule, step after step. A stage keeps only the inputs
// of the micro-batches between their forward and their backward, and
// recomputes a micro-batch's forward before its backward unless it was the
// last forward (GPipe's re-materialisation): layers hold one micro-batch's
// activations, so a stage's activation memory is its inputs' (M of them
// under GPipe, at most K - s under 1F1B).
//
// The stage's gradients are summed over micro-batches, each weighted by its
// share of the batch's rows (MicroBatchGradients: the same bits under
// either schedule), so they are the gradient of the batch's mean loss, as
// one Model::Backward on the whole batch gives it (up to the order of
// float additions inside each layer's sums). A step of one micro-batch
// keeps its gradients as they come, in float, without the double sums:
// weighted by exactly 1, they are the same bits.
//
// Not thread-safe. Borrows the stage and links, which must outlive it.
class StageSchedule {
 public:
  // `previous` is null on the first stage (options.stage 0), `next` on the
  // last (options.stage + 1 == options.stages).
  StageSchedule(nn::StageModel* stage, StageLink* previous, StageLink* next,
                const ScheduleOptions& options);

  // Runs `batch` through this stage; returns the batch's mean loss (every
  // stage learns it: the last stage's micro-batch losses travel back with
  // the gradients). The gradients are then in gradient(). A failed step
  // (a neighbour that died, a diverged loss) leaves them unspecified.
  absl::StatusOr<float> Step(const StepBatch& batch);

  // The last Step's gradient of tensor `tensor_id` (a tensor of this
  // stage), in float.
  absl::Span<const float> gradient(int tensor_id) const {
    return gradients_[tensor_id - stage_->range().first_tensor];
  }

  // How long the last Step waited for its neighbours' messages: the
  // pipeline's bubble as this stage saw it (plus a slower neighbour's lag).
  absl::Duration waited() const { return waited_; }

  // The most micro-batches whose inputs the last Step held at once.
  int most_in_flight() const { return most_in_flight_; }

  // Bytes of the host buffers it keeps between steps (the micro-batches'
  // inputs, outputs and gradients, the summed gradients):
  // ScheduleHostBytes (schedule_memory.h) once it ran a full step.
  int64_t host_bytes() const;

 private:
  absl::Status Run(const StepBatch& batch, const ScheduleAction& action);
  // Runs micro-batch i forward, its output (not the last stage) to `out`.
  absl::Status Forward(const StepBatch& batch, int i, std::vector<float>& out);
  absl::Status Backward(const StepBatch& batch, int i);
  // link->Receive, timed into waited_.
  absl::StatusOr<float> Receive(StageLink& link, const Tag& tag, int rows,
                                absl::Span<float> out);

  nn::StageModel* const stage_;
  StageLink* const previous_;
  StageLink* const next_;
  const ScheduleOptions options_;

  // The current step's micro-batches.
  std::vector<int> rows_;
  std::vector<int> offsets_;
  std::vector<float> losses_;
  // Each micro-batch's input, as received (not the first stage), from its
  // receipt to its backward; spare_ keeps the buffers of those done.
  std::vector<std::vector<float>> inputs_;
  std::vector<std::vector<float>> spare_;
  int in_flight_ = 0;
  int most_in_flight_ = 0;
  std::vector<float> output_;       // Of micro-batch output_of_.
  std::vector<float> recomputed_;   // A recomputed forward's output.
  std::vector<float> grad_output_;  // Of micro-batch grad_output_of_.
  std::vector<float> grad_input_;   // Of micro-batch grad_input_of_.
  int output_of_ = -1;
  int grad_output_of_ = -1;
  int grad_input_of_ = -1;
  int forwarded_ = -1;  // The micro-batch the layers' activations are of.
  absl::Duration waited_;
  MicroBatchGradients sums_;
  std::vector<std::vector<float>> gradients_;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_STAGE_SCHEDULE_H_
