#ifndef PS_WORKER_NN_LAYER_H_
#define PS_WORKER_NN_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "worker/nn/model_description.h"

namespace ps::worker::nn {

// What a forward pass is about, beyond its input.
struct Pass {
  int batch = 0;  // Examples, in [1, the layer's max_batch].
  // Dropout is applied only while training; otherwise it passes x through.
  bool training = false;
  // Selects the dropout mask: example e of the batch uses mask elements of
  // example `first_example + e` of step `step` (see kernels::DropoutMask).
  uint64_t step = 0;
  uint64_t first_example = 0;
};

// One layer of a network on a kernels::Backend, batch-major NCHW:
// Forward maps [batch, input_shape()] to [batch, output_shape()] and
// Backward maps d(loss)/d(output) back to d(loss)/d(input) and to the
// gradients of the layer's parameters (weight, then bias, for dense and
// conv layers; none for the others).
//
// Every backend buffer is allocated by CreateLayer, for up to max_batch
// examples; passes allocate nothing. Parameters start at zero.
//
// Thread safety: none, like the backend. Ownership: the layer owns its
// buffers and borrows the backend, which must outlive it.
class Layer {
 public:
  // Called by Backward with a parameter's index once its gradient is final;
  // an error stops Backward, which returns it.
  using ParameterReady = std::function<absl::Status(int parameter)>;

  virtual ~Layer() = default;

  const LayerConfig& config() const { return config_; }
  const ActivationShape& input_shape() const { return input_; }
  const ActivationShape& output_shape() const { return output_; }

  int num_parameters() const { return static_cast<int>(parameters_.size()); }
  // Parameter i and its gradient from the last Backward, owned by the layer;
  // requires 0 <= i < num_parameters().
  kernels::DeviceBuffer& parameter(int i) { return *parameters_[i]; }
  const kernels::DeviceBuffer& parameter_gradient(int i) const {
    return *gradients_[i];
  }

  // Runs the layer on `x` ([pass.batch, input_shape()]) and returns where
  // the output is: a buffer of the layer's, valid until its next Forward,
  // or `&x` itself for a layer that passes its input through (flatten, and
  // dropout outside training).
  virtual absl::StatusOr<const kernels::DeviceBuffer*> Forward(
      const Pass& pass, const kernels::DeviceBuffer& x) = 0;

  // Backpropagates through the last Forward, which must have been given the
  // same `pass` and `x`: `grad_y` is d(loss)/d(output) for its batch.
  // Computes every parameter's gradient, reporting each through `ready` in
  // decreasing index order (bias before weight), then, if `want_grad_x`,
  // d(loss)/d(x) and returns its buffer (the layer's own, or `&grad_y` for a
  // pass-through); returns nullptr when !want_grad_x.
  virtual absl::StatusOr<const kernels::DeviceBuffer*> Backward(
      const Pass& pass, const kernels::DeviceBuffer& x,
      const kernels::DeviceBuffer& grad_y, bool want_grad_x,
      const ParameterReady& ready) = 0;

 protected:
  Layer(const LayerConfig& config, const ActivationShape& input,
        const ActivationShape& output, kernels::Backend* backend)
      : config_(config), input_(input), output_(output), backend_(backend) {}

  kernels::Backend& backend() const { return *backend_; }

  // Filled by the subclass's initialization, weight first.
  std::vector<std::unique_ptr<kernels::DeviceBuffer>> parameters_;
  std::vector<std::unique_ptr<kernels::DeviceBuffer>> gradients_;

 private:
  const LayerConfig config_;
  const ActivationShape input_;
  const ActivationShape output_;
  kernels::Backend* const backend_;
};

struct LayerOptions {
  int max_batch = 1;  // At least 1.
  // Whether Backward will be asked for d(loss)/d(x): false for the first
  // layers of a network, which then allocate no buffer for it.
  bool input_gradient = true;
  // A dropout layer's masks; see DropoutSeed.
  uint64_t dropout_seed = 0;
};

// Creates the layer `config` for inputs of shape `input` (as
// ModelDescription checked them: InvalidArgument otherwise), with buffers for
// options.max_batch examples on `backend` (its error if allocation fails).
absl::StatusOr<std::unique_ptr<Layer>> CreateLayer(const LayerConfig& config,
                                                   const ActivationShape& input,
                                                   const LayerOptions& options,
                                                   kernels::Backend* backend);

// The loss every network ends in: the mean over a batch of softmax
// cross-entropy between rows of logits and class labels. Buffers are
// allocated by Create, for up to max_batch rows. Thread safety and
// ownership as for Layer.
class SoftmaxCrossEntropyLoss {
 public:
  // InvalidArgument for classes or max_batch below 1, or a null backend;
  // the backend's error if allocation fails.
  static absl::StatusOr<std::unique_ptr<SoftmaxCrossEntropyLoss>> Create(
      int classes, int max_batch, kernels::Backend* backend);

  int classes() const { return classes_; }

  // Uploads `labels` (batch class indices, as floats; the caller checks
  // them) and returns the mean loss of [batch, classes] `logits`, which
  // waits for the backend. Afterwards gradient() holds d(loss)/d(logits).
  absl::StatusOr<float> Forward(int batch, const kernels::DeviceBuffer& logits,
                                absl::Span<const float> labels);
  const kernels::DeviceBuffer& gradient() const { return *gradient_; }

 private:
  SoftmaxCrossEntropyLoss(int classes, kernels::Backend* backend)
      : classes_(classes), backend_(backend) {}

  const int classes_;
  kernels::Backend* const backend_;
  std::unique_ptr<kernels::DeviceBuffer> labels_;
  std::unique_ptr<kernels::DeviceBuffer> loss_;
  std::unique_ptr<kernels::DeviceBuffer> gradient_;
};

// The mask seed of the dropout layer at index `layer` of a network whose
// masks come from `model_seed`: distinct layers draw independent masks.
uint64_t DropoutSeed(uint64_t model_seed, int layer);

}  // namespace ps::worker::nn

#endif  // PS_WORKER_NN_LAYER_H_
