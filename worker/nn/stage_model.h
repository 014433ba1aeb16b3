#ifndef PS_WORKER_NN_STAGE_MODEL_H_
#define PS_WORKER_NN_STAGE_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "worker/nn/model.h"
#include "worker/nn/model_description.h"
#include "worker/nn/stage_split.h"

namespace ps::worker::nn {

// One pipeline stage of a network: the layers of a StageRange on a backend,
// in training mode. The first stage takes examples, the others the previous
// stage's activations; the last ends in the softmax cross-entropy loss, the
// others hand their output to the next stage. Backward takes d(loss)/d(output)
// from the next stage (the last stage its own loss's) and gives
// d(loss)/d(input) for the previous one. The arithmetic is the unsplit
// Model's, layer for layer, and dropout masks are drawn from the layer's
// index in the whole network, so K stages compute what one Model computes.
//
// Activations move through host memory (spans), as they go to a socket.
// Tensor ids are the whole model's (StageRange::first_tensor ...).
//
// Thread safety: none, like the backend. Borrows the backend.
class StageModel {
 public:
  // Receives a tensor's gradient from Backward: host memory owned by the
  // stage, valid until the next Backward.
  using GradientCallback =
      std::function<absl::Status(int tensor_id, absl::Span<const float>)>;

  // InvalidArgument for a null backend, a max_batch out of [1, 2^20] or a
  // range that is not the description's; the backend's error if allocation
  // fails.
  static absl::StatusOr<std::unique_ptr<StageModel>> Create(
      const ModelDescription& description, const StageRange& range,
      const ModelOptions& options, kernels::Backend* backend);

  virtual ~StageModel() = default;

  virtual const StageRange& range() const = 0;
  bool first() const { return range().first_layer == 0; }
  virtual bool last() const = 0;
  // Floats per example in and out.
  virtual int64_t input_size() const = 0;
  virtual int64_t output_size() const = 0;
  virtual int max_batch() const = 0;
  // Bytes of the host buffers the stage keeps (its gradients' host copies,
  // the last stage's predictions), allocated by Create; its backend's
  // buffers are the backend's to count.
  virtual int64_t host_bytes() const = 0;

  // Copies `values` into tensor `tensor_id` (whole) of this stage;
  // InvalidArgument for a tensor of another stage, a wrong size or a
  // non-finite value. Invalidates the last Forward.
  virtual absl::Status SetWeights(int tensor_id,
                                  absl::Span<const float> values) = 0;

  // Runs `rows` examples (`input`: rows * input_size() floats) forward.
  // Not the last stage: writes rows * output_size() floats to `output` and
  // returns 0; `labels` is not read. The last stage: returns the mean loss
  // over the rows of `labels` (class indices); `output` is not written.
  // InvalidArgument for rows outside [1, max_batch()], mismatched sizes, a
  // non-finite input or a label that is not a class; FailedPrecondition if
  // the loss is not finite.
  virtual absl::StatusOr<float> Forward(absl::Span<const float> input,
                                        absl::Span<const float> labels,
                                        int rows, const StepInfo& step,
                                        absl::Span<float> output) = 0;

  // Runs `rows` examples forward in evaluation mode (no dropout), for a
  // pipelined test: not the last stage, writes the output as Forward does
  // and returns 0; the last stage returns how many rows' largest logit is
  // their label (Model::Evaluate's count). Checks its arguments as Forward
  // does, and discards the last Forward.
  virtual absl::StatusOr<int64_t> Evaluate(absl::Span<const float> input,
                                           absl::Span<const float> labels,
                                           int rows,
                                           absl::Span<float> output) = 0;

  // Backpropagates the last Forward. `grad_output` is d(loss)/d(output),
  // rows * output_size() floats (empty on the last stage). Reports each of
  // this stage's tensors' gradients through `on_gradient`, last first, then
  // writes d(loss)/d(input), rows * input_size() floats, to `grad_input`
  // (empty on the first stage). FailedPrecondition without a Forward to
  // backpropagate.
  virtual absl::Status Backward(absl::Span<const float> grad_output,
                                const GradientCallback& on_gradient,
                                absl::Span<float> grad_input) = 0;
};

}  // namespace ps::worker::nn

#endif  // PS_WORKER_NN_STAGE_MODEL_H_
