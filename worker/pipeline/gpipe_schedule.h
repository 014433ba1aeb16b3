#ifndef PS_WORKER_PIPELINE_GPIPE_SCHEDULE_H_
#define PS_WORKER_PIPELINE_GPIPE_SCHEDULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/nn/stage_model.h"
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

// GPipe (Huang et al. 2019) for one stage: every micro-batch forward, each
// output sent on to the next stage as soon as it is made, then every
// micro-batch backward, last first, each input gradient sent back. A stage
// keeps only its micro-batches' inputs and recomputes a micro-batch's
// forward before its backward (GPipe's re-materialisation): layers hold one
// micro-batch's activations, so a stage's activation memory does not grow
// with M. The last micro-batch's backward, which follows its forward,
// needs no recomputation.
//
// The stage's gradients are summed over micro-batches, each weighted by its
// share of the batch's rows, so they are the gradient of the batch's mean
// loss, as one Model::Backward on the whole batch gives it (up to the
// order of float additions inside each layer's sums).
//
// Not thread-safe. Borrows the stage and links, which must outlive it.
class GpipeSchedule {
 public:
  // `previous` is null on the first stage, `next` on the last.
  GpipeSchedule(nn::StageModel* stage, StageLink* previous, StageLink* next,
                int micro_batches);

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

 private:
  absl::Status Forward(const StepBatch& batch, int i);
  absl::Status Backward(const StepBatch& batch, int i);
  // link->Receive, timed into waited_.
  absl::StatusOr<float> Receive(StageLink& link, const Tag& tag, int rows,
                                absl::Span<float> out);

  nn::StageModel* const stage_;
  StageLink* const previous_;
  StageLink* const next_;
  const int micro_batches_;

  // The current step's micro-batches.
  std::vector<int> rows_;
  std::vector<int> offsets_;
  std::vector<float> losses_;
  // Each micro-batch's input, as received (not the first stage).
  std::vector<std::vector<float>> inputs_;
  std::vector<float> output_;
  std::vector<float> grad_output_;
  std::vector<float> grad_input_;
  absl::Duration waited_;
  int forwarded_ = -1;  // The micro-batch the layers' activations are of.
  std::vector<std::vector<double>> sums_;
  std::vector<std::vector<float>> gradients_;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_GPIPE_SCHEDULE_H_
