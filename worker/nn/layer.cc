#include "worker/nn/layer.h"

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kernels/dropout_mask.h"
#include "worker/nn/status_macros.h"

namespace ps::worker::nn {
namespace {

using kernels::DeviceBuffer;
using BufferPtr = std::unique_ptr<DeviceBuffer>;

// A buffer of n floats; zeros when `zero` (parameters must not start with
// whatever the allocator left, which differs between backends).
absl::Status AllocateInto(kernels::Backend& backend, size_t n, bool zero,
                          BufferPtr& out) {
  absl::StatusOr<BufferPtr> buffer = backend.Allocate(n);
  if (!buffer.ok()) return buffer.status();
  if (zero && n > 0) {
    const std::vector<float> zeros(n, 0.0f);
    PS_NN_RETURN_IF_ERROR(backend.CopyToDevice(zeros.data(), n, **buffer, 0));
  }
  out = *std::move(buffer);
  return absl::OkStatus();
}

size_t Elements(int batch, const ActivationShape& shape) {
  return static_cast<size_t>(batch) * static_cast<size_t>(shape.size());
}

// Layers with an output buffer and, when asked for, an input-gradient one.
class BufferedLayer : public Layer {
 public:
  BufferedLayer(const LayerConfig& config, const ActivationShape& input,
                const ActivationShape& output, kernels::Backend* backend)
      : Layer(config, input, output, backend) {}

 protected:
  absl::Status AllocateActivations(const LayerOptions& options) {
    PS_NN_RETURN_IF_ERROR(
        AllocateInto(backend(), Elements(options.max_batch, output_shape()),
                     false, output_));
    if (options.input_gradient) {
      PS_NN_RETURN_IF_ERROR(
          AllocateInto(backend(), Elements(options.max_batch, input_shape()),
                       false, grad_x_));
    }
    return absl::OkStatus();
  }

  // Adds a zeroed parameter of n elements and its gradient buffer.
  absl::Status AddParameter(size_t n) {
    parameters_.emplace_back();
    gradients_.emplace_back();
    PS_NN_RETURN_IF_ERROR(AllocateInto(backend(), n, true, parameters_.back()));
    return AllocateInto(backend(), n, false, gradients_.back());
  }

  // The grad_x buffer for a Backward that wants it (FailedPrecondition if the
  // layer was created without one).
  absl::StatusOr<DeviceBuffer*> GradX() {
    if (grad_x_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "layer \"%s\" was created without an input gradient", config().text));
    }
    return grad_x_.get();
  }

  BufferPtr output_;
  BufferPtr grad_x_;
};

class DenseLayer final : public BufferedLayer {
 public:
  using BufferedLayer::BufferedLayer;

  absl::Status Init(const LayerOptions& options) {
    PS_NN_RETURN_IF_ERROR(AllocateActivations(options));
    PS_NN_RETURN_IF_ERROR(AddParameter(static_cast<size_t>(in()) * out()));
    return AddParameter(out());
  }

  // Exactly worker::Mlp's calls, so that an MLP built from layers computes
  // the same bits.
  absl::StatusOr<const DeviceBuffer*> Forward(const Pass& pass,
                                              const DeviceBuffer& x) override {
    PS_NN_RETURN_IF_ERROR(backend().Gemm(false, false, pass.batch, out(), in(),
                                         1.0f, x, *parameters_[0], 0.0f,
                                         *output_));
    PS_NN_RETURN_IF_ERROR(
        backend().AddBias(pass.batch, out(), *parameters_[1], *output_));
    return output_.get();
  }

  absl::StatusOr<const DeviceBuffer*> Backward(
      const Pass& pass, const DeviceBuffer& x, const DeviceBuffer& grad_y,
      bool want_grad_x, const ParameterReady& ready) override {
    PS_NN_RETURN_IF_ERROR(
        backend().ColumnSum(pass.batch, out(), grad_y, *gradients_[1]));
    PS_NN_RETURN_IF_ERROR(ready(1));
    // dW = x^T grad_y: [in x batch] [batch x out].
    PS_NN_RETURN_IF_ERROR(backend().Gemm(true, false, in(), out(), pass.batch,
                                         1.0f, x, grad_y, 0.0f,
                                         *gradients_[0]));
    PS_NN_RETURN_IF_ERROR(ready(0));
    if (!want_grad_x) return nullptr;
    absl::StatusOr<DeviceBuffer*> grad_x = GradX();
    if (!grad_x.ok()) return grad_x.status();
    // dx = grad_y W^T.
    PS_NN_RETURN_IF_ERROR(backend().Gemm(false, true, pass.batch, in(), out(),
                                         1.0f, grad_y, *parameters_[0], 0.0f,
                                         **grad_x));
    return *grad_x;
  }

 private:
  int in() const { return static_cast<int>(input_shape().size()); }
  int out() const { return config().units; }
};

class ConvLayer final : public BufferedLayer {
 public:
  using BufferedLayer::BufferedLayer;

  absl::Status Init(const LayerOptions& options) {
    PS_NN_RETURN_IF_ERROR(AllocateActivations(options));
    PS_NN_RETURN_IF_ERROR(AddParameter(Shape(0).weight_size()));
    return AddParameter(config().units);
  }

  absl::StatusOr<const DeviceBuffer*> Forward(const Pass& pass,
                                              const DeviceBuffer& x) override {
    const kernels::Conv2dShape shape = Shape(pass.batch);
    PS_NN_RETURN_IF_ERROR(
        backend().Conv2dForward(shape, x, *parameters_[0], *output_));
    PS_NN_RETURN_IF_ERROR(
        backend().AddChannelBias(pass.batch, shape.out_channels, Spatial(shape),
                                 *parameters_[1], *output_));
    return output_.get();
  }

  absl::StatusOr<const DeviceBuffer*> Backward(
      const Pass& pass, const DeviceBuffer& x, const DeviceBuffer& grad_y,
      bool want_grad_x, const ParameterReady& ready) override {
    const kernels::Conv2dShape shape = Shape(pass.batch);
    PS_NN_RETURN_IF_ERROR(
        backend().ChannelBiasGrad(pass.batch, shape.out_channels,
                                  Spatial(shape), grad_y, *gradients_[1]));
    PS_NN_RETURN_IF_ERROR(ready(1));
    PS_NN_RETURN_IF_ERROR(
        backend().Conv2dBackwardFilter(shape, x, grad_y, *gradients_[0]));
    PS_NN_RETURN_IF_ERROR(ready(0));
    if (!want_grad_x) return nullptr;
    absl::StatusOr<DeviceBuffer*> grad_x = GradX();
    if (!grad_x.ok()) return grad_x.status();
    PS_NN_RETURN_IF_ERROR(
        backend().Conv2dBackwardData(shape, grad_y, *parameters_[0], **grad_x));
    return *grad_x;
  }

 private:
  static int Spatial(const kernels::Conv2dShape& s) {
    return s.out_height() * s.out_width();
  }

  kernels::Conv2dShape Shape(int batch) const {
    return ConvShape(config(), input_shape(), batch);
  }
};

class PoolLayer final : public BufferedLayer {
 public:
  using BufferedLayer::BufferedLayer;

  absl::Status Init(const LayerOptions& options) {
    PS_NN_RETURN_IF_ERROR(AllocateActivations(options));
    if (!is_max()) return absl::OkStatus();
    return AllocateInto(backend(), Elements(options.max_batch, output_shape()),
                        false, argmax_);
  }

  absl::StatusOr<const DeviceBuffer*> Forward(const Pass& pass,
                                              const DeviceBuffer& x) override {
    const kernels::Pool2dShape shape = Shape(pass.batch);
    PS_NN_RETURN_IF_ERROR(
        is_max() ? backend().MaxPool2dForward(shape, x, *output_, *argmax_)
                 : backend().AvgPool2dForward(shape, x, *output_));
    return output_.get();
  }

  absl::StatusOr<const DeviceBuffer*> Backward(
      const Pass& pass, const DeviceBuffer& x, const DeviceBuffer& grad_y,
      bool want_grad_x, const ParameterReady& ready) override {
    if (!want_grad_x) return nullptr;
    absl::StatusOr<DeviceBuffer*> grad_x = GradX();
    if (!grad_x.ok()) return grad_x.status();
    const kernels::Pool2dShape shape = Shape(pass.batch);
    PS_NN_RETURN_IF_ERROR(
        is_max()
            ? backend().MaxPool2dBackward(shape, grad_y, *argmax_, **grad_x)
            : backend().AvgPool2dBackward(shape, grad_y, **grad_x));
    return *grad_x;
  }

 private:
  bool is_max() const { return config().kind == LayerKind::kMaxPool; }

  kernels::Pool2dShape Shape(int batch) const {
    return PoolShape(config(), input_shape(), batch);
  }

  BufferPtr argmax_;  // Max pooling only.
};

class ReluLayer final : public BufferedLayer {
 public:
  using BufferedLayer::BufferedLayer;

  absl::Status Init(const LayerOptions& options) {
    return AllocateActivations(options);
  }

  absl::StatusOr<const DeviceBuffer*> Forward(const Pass& pass,
                                              const DeviceBuffer& x) override {
    PS_NN_RETURN_IF_ERROR(
        backend().Relu(Elements(pass.batch, output_shape()), x, *output_));
    return output_.get();
  }

  absl::StatusOr<const DeviceBuffer*> Backward(
      const Pass& pass, const DeviceBuffer& x, const DeviceBuffer& grad_y,
      bool want_grad_x, const ParameterReady& ready) override {
    if (!want_grad_x) return nullptr;
    absl::StatusOr<DeviceBuffer*> grad_x = GradX();
    if (!grad_x.ok()) return grad_x.status();
    // The output is positive exactly where the input is.
    PS_NN_RETURN_IF_ERROR(backend().ReluGrad(
        Elements(pass.batch, output_shape()), *output_, grad_y, **grad_x));
    return *grad_x;
  }
};

// No computation: NCHW batches are already flat per example.
class FlattenLayer final : public Layer {
 public:
  FlattenLayer(const LayerConfig& config, const ActivationShape& input,
               const ActivationShape& output, kernels::Backend* backend)
      : Layer(config, input, output, backend) {}

  absl::StatusOr<const DeviceBuffer*> Forward(const Pass& pass,
                                              const DeviceBuffer& x) override {
    return &x;
  }

  absl::StatusOr<const DeviceBuffer*> Backward(
      const Pass& pass, const DeviceBuffer& x, const DeviceBuffer& grad_y,
      bool want_grad_x, const ParameterReady& ready) override {
    return want_grad_x ? &grad_y : nullptr;
  }
};

class DropoutLayer final : public BufferedLayer {
 public:
  DropoutLayer(const LayerConfig& config, const ActivationShape& input,
               const ActivationShape& output, kernels::Backend* backend,
               uint64_t seed)
      : BufferedLayer(config, input, output, backend), seed_(seed) {}

  absl::Status Init(const LayerOptions& options) {
    return AllocateActivations(options);
  }

  absl::StatusOr<const DeviceBuffer*> Forward(const Pass& pass,
                                              const DeviceBuffer& x) override {
    if (!pass.training) return &x;
    PS_NN_RETURN_IF_ERROR(backend().DropoutForward(
        Elements(pass.batch, output_shape()), Mask(pass), x, *output_));
    return output_.get();
  }

  absl::StatusOr<const DeviceBuffer*> Backward(
      const Pass& pass, const DeviceBuffer& x, const DeviceBuffer& grad_y,
      bool want_grad_x, const ParameterReady& ready) override {
    if (!want_grad_x) return nullptr;
    if (!pass.training) return &grad_y;
    absl::StatusOr<DeviceBuffer*> grad_x = GradX();
    if (!grad_x.ok()) return grad_x.status();
    PS_NN_RETURN_IF_ERROR(backend().DropoutBackward(
        Elements(pass.batch, output_shape()), Mask(pass), grad_y, **grad_x));
    return *grad_x;
  }

 private:
  // Element i of example e is element (first_example + e) * size + i of the
  // step's mask: the same whichever worker, or batch, holds the example.
  kernels::DropoutMask Mask(const Pass& pass) const {
    kernels::DropoutMask mask;
    mask.rate = config().rate;
    mask.seed = seed_;
    mask.step = pass.step;
    mask.first_index =
        pass.first_example * static_cast<uint64_t>(output_shape().size());
    return mask;
  }

  const uint64_t seed_;
};

template <typename T, typename... Extra>
absl::StatusOr<std::unique_ptr<Layer>> Make(const LayerConfig& config,
                                            const ActivationShape& input,
                                            const ActivationShape& output,
                                            const LayerOptions& options,
                                            kernels::Backend* backend,
                                            Extra... extra) {
  auto layer = std::make_unique<T>(config, input, output, backend, extra...);
  if constexpr (!std::is_same_v<T, FlattenLayer>) {
    PS_NN_RETURN_IF_ERROR(layer->Init(options));
  }
  return layer;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SoftmaxCrossEntropyLoss>>
SoftmaxCrossEntropyLoss::Create(int classes, int max_batch,
                                kernels::Backend* backend) {
  if (backend == nullptr || classes < 1 || max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SoftmaxCrossEntropyLoss: needs a backend, classes >= 1 and max batch "
        ">= 1, got %d and %d",
        classes, max_batch));
  }
  std::unique_ptr<SoftmaxCrossEntropyLoss> loss(
      new SoftmaxCrossEntropyLoss(classes, backend));
  const size_t batch = max_batch;
  PS_NN_RETURN_IF_ERROR(AllocateInto(*backend, batch, false, loss->labels_));
  PS_NN_RETURN_IF_ERROR(AllocateInto(*backend, 1, false, loss->loss_));
  PS_NN_RETURN_IF_ERROR(
      AllocateInto(*backend, batch * classes, false, loss->gradient_));
  return loss;
}

absl::StatusOr<float> SoftmaxCrossEntropyLoss::Forward(
    int batch, const kernels::DeviceBuffer& logits,
    absl::Span<const float> labels) {
  if (labels.size() != static_cast<size_t>(batch)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SoftmaxCrossEntropyLoss: %d labels for a batch of %d",
                        labels.size(), batch));
  }
  PS_NN_RETURN_IF_ERROR(
      backend_->CopyToDevice(labels.data(), batch, *labels_, 0));
  PS_NN_RETURN_IF_ERROR(backend_->SoftmaxCrossEntropy(
      batch, classes_, logits, *labels_, *loss_, *gradient_));
  float loss = 0.0f;
  PS_NN_RETURN_IF_ERROR(backend_->CopyToHost(*loss_, 0, 1, &loss));
  return loss;
}

uint64_t DropoutSeed(uint64_t model_seed, int layer) {
  return kernels::dropout::Mix64(
      model_seed ^ kernels::dropout::Mix64(static_cast<uint64_t>(layer) + 1 +
                                           kernels::dropout::kGolden));
}

absl::StatusOr<std::unique_ptr<Layer>> CreateLayer(const LayerConfig& config,
                                                   const ActivationShape& input,
                                                   const LayerOptions& options,
                                                   kernels::Backend* backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("CreateLayer: no backend");
  }
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CreateLayer: max batch %d is below 1", options.max_batch));
  }
  // The description's checks, so that a layer never meets a shape the
  // kernels would refuse mid-step.
  absl::StatusOr<ActivationShape> shaped = LayerOutputShape(config, input);
  if (!shaped.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CreateLayer \"%s\" for input %s: %s", config.text,
                        input.ToString(), shaped.status().message()));
  }
  const ActivationShape output = *shaped;
  switch (config.kind) {
    case LayerKind::kConv:
      return Make<ConvLayer>(config, input, output, options, backend);
    case LayerKind::kDense:
      return Make<DenseLayer>(config, input, output, options, backend);
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
      return Make<PoolLayer>(config, input, output, options, backend);
    case LayerKind::kRelu:
      return Make<ReluLayer>(config, input, output, options, backend);
    case LayerKind::kFlatten:
      return Make<FlattenLayer>(config, input, output, options, backend);
    case LayerKind::kDropout:
      return Make<DropoutLayer>(config, input, output, options, backend,
                                options.dropout_seed);
  }
  return absl::InvalidArgumentError("CreateLayer: unknown layer kind");
}

}  // namespace ps::worker::nn
