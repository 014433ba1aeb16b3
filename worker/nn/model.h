#ifndef PS_WORKER_NN_MODEL_H_
#define PS_WORKER_NN_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model_spec.h"
#include "kernels/backend.h"
#include "worker/nn/model_description.h"

namespace ps::worker::nn {

// Which dropout mask a training step draws (see kernels::DropoutMask): the
// mask of an example depends only on the model's seed, `step` and the
// example's position in the step's global batch, so M workers that each pass
// the offset of their part as `first_example` drop exactly what one worker
// running the whole global batch would.
struct StepInfo {
  uint64_t step = 0;
  uint64_t first_example = 0;
};

// A classifier the trainer drives without knowing its architecture: it
// declares its tensors (spec()), takes their values (SetWeights), runs
// batches forward to a mean softmax cross-entropy loss, and backward,
// handing each tensor's gradient to the caller as soon as it is final so it
// can be pushed while earlier layers are still being computed.
//
// Examples are `example_size()` floats each (NCHW, batch-major), labels one
// float class index per example, as worker::Dataset gives them.
//
// Thread safety: none; one thread at a time, like the backend it runs on.
class Model {
 public:
  // Receives a tensor's gradient from Backward, on the calling thread. The
  // span is host memory owned by the model; it stays valid and unchanged
  // until the next Backward or the model's destruction. An error stops
  // Backward, which returns it. The callback may call Gradient and the
  // accessors; anything that runs or changes the model (SetWeights, Forward,
  // Backward, Evaluate, Predict) fails there with FailedPrecondition, as
  // the rest of Backward still reads the weights.
  using GradientCallback =
      std::function<absl::Status(int tensor_id, absl::Span<const float>)>;

  virtual ~Model() = default;

  // The declaration; a tensor's id is its index here.
  virtual const ModelSpec& spec() const = 0;
  virtual int64_t example_size() const = 0;
  virtual int num_classes() const = 0;
  virtual int max_batch() const = 0;

  // Copies `values` into elements [offset, offset + values.size()) of tensor
  // `tensor_id` (a slice, as a server holds it). InvalidArgument, writing
  // nothing, for an unknown id, a slice past the end or a non-finite value.
  // Weights are zero until set. Invalidates the last Forward.
  virtual absl::Status SetWeights(int tensor_id, absl::Span<const float> values,
                                  int64_t offset = 0) = 0;

  // Dropout applies in training mode (the initial mode) and not in
  // evaluation mode; Evaluate and Predict always run in evaluation mode.
  virtual void SetTraining(bool training) = 0;
  virtual bool training() const = 0;

  // Runs `batch` examples forward and returns their mean loss. `images`
  // holds batch * example_size() floats, `labels` batch class indices.
  // InvalidArgument for a batch outside [1, max_batch()], mismatched sizes, a
  // non-finite pixel or a label that is not a class; FailedPrecondition if
  // the loss is not finite (training diverged), and Backward is then refused.
  // A call rejected for its input changes nothing, the last Forward
  // included.
  virtual absl::StatusOr<float> Forward(absl::Span<const float> images,
                                        absl::Span<const float> labels,
                                        int batch,
                                        const StepInfo& step = {}) = 0;

  // Backpropagates the last Forward, reporting every tensor's gradient of
  // that batch's mean loss through `on_gradient` once it is final, in
  // decreasing tensor id order (the last layer's bias first). The next
  // layer's work starts only after the callback returns: hand the values
  // off rather than block. FailedPrecondition if there is no Forward to
  // backpropagate (none yet, it failed, or Evaluate, Predict or SetWeights
  // ran since).
  virtual absl::Status Backward(const GradientCallback& on_gradient) = 0;

  // The gradient of `tensor_id` reported by the last Backward (same span as
  // the callback got). FailedPrecondition if it was not reported.
  virtual absl::StatusOr<absl::Span<const float>> Gradient(
      int tensor_id) const = 0;

  // How many of the `n` examples (any n >= 0) the model classifies
  // correctly, max_batch() at a time, in evaluation mode. Same input checks
  // as Forward.
  virtual absl::StatusOr<int64_t> Evaluate(absl::Span<const float> images,
                                           absl::Span<const float> labels,
                                           int64_t n) = 0;

  // Writes the class of each of the n = classes.size() examples (the index
  // of its largest output, the lowest on ties), in evaluation mode.
  virtual absl::Status Predict(absl::Span<const float> images,
                               absl::Span<int> classes) = 0;
};

struct ModelOptions {
  // Examples per Forward at most, in [1, 2^20]; buffers are sized for it.
  int max_batch = 64;
  // The declaration's seed (the servers' initializers), also mixed into
  // every dropout mask.
  uint64_t seed = 1;
};

// What CreateModel and StageModel::Create check before building anything:
// InvalidArgument, prefixed by `caller`, for a null backend or a max_batch
// outside [1, 2^20].
absl::Status CheckModelArguments(absl::string_view caller,
                                 const ModelOptions& options,
                                 const kernels::Backend* backend);

// Builds `description` on `backend`, allocating every buffer now; steps
// allocate nothing on the backend. InvalidArgument for a null backend or
// options out of range; the backend's error if allocation fails.
// Ownership: the model borrows `backend`, which must outlive it.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(
    const ModelDescription& description, const ModelOptions& options,
    kernels::Backend* backend);

}  // namespace ps::worker::nn

#endif  // PS_WORKER_NN_MODEL_H_
