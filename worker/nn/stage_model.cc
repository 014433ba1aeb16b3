#include "worker/nn/stage_model.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "worker/nn/layer.h"
#include "worker/nn/status_macros.h"

namespace ps::worker::nn {
namespace {

using kernels::DeviceBuffer;
using BufferPtr = std::unique_ptr<DeviceBuffer>;

constexpr int kMaxBatch = 1 << 20;

absl::Status Allocate(kernels::Backend& backend, size_t n, BufferPtr& out) {
  absl::StatusOr<BufferPtr> buffer = backend.Allocate(n);
  if (!buffer.ok()) return buffer.status();
  out = *std::move(buffer);
  return absl::OkStatus();
}

bool Trainable(const LayerConfig& layer) {
  return layer.kind == LayerKind::kConv || layer.kind == LayerKind::kDense;
}

class LayerStage final : public StageModel {
 public:
  LayerStage(const ModelDescription& description, const StageRange& range,
             const ModelOptions& options, kernels::Backend* backend)
      : range_(range),
        last_(range.end_layer == static_cast<int>(description.layers().size())),
        classes_(description.num_classes()),
        max_batch_(options.max_batch),
        backend_(backend) {}

  absl::Status Init(const ModelDescription& description, uint64_t seed);

  const StageRange& range() const override { return range_; }
  bool last() const override { return last_; }
  int64_t input_size() const override { return input_size_; }
  int64_t output_size() const override { return range_.output_size; }
  int max_batch() const override { return max_batch_; }
  int64_t host_bytes() const override {
    size_t floats = host_predictions_.capacity();
    for (const std::vector<float>& g : host_gradients_) floats += g.capacity();
    return static_cast<int64_t>(floats * sizeof(float));
  }

  absl::Status SetWeights(int tensor_id,
                          absl::Span<const float> values) override;
  absl::StatusOr<float> Forward(absl::Span<const float> input,
                                absl::Span<const float> labels, int rows,
                                const StepInfo& step,
                                absl::Span<float> output) override;
  absl::Status Backward(absl::Span<const float> grad_output,
                        const GradientCallback& on_gradient,
                        absl::Span<float> grad_input) override;
  absl::StatusOr<int64_t> Evaluate(absl::Span<const float> input,
                                   absl::Span<const float> labels, int rows,
                                   absl::Span<float> output) override;

 private:
  struct Slot {
    int layer = 0;  // Index into layers_.
    int parameter = 0;
  };

  absl::Status CheckForward(absl::Span<const float> input,
                            absl::Span<const float> labels, int rows,
                            absl::Span<float> output) const;

  const StageRange range_;
  const bool last_;
  const int classes_;
  const int max_batch_;
  kernels::Backend* const backend_;
  int64_t input_size_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;  // Of the range, in order.
  std::vector<Slot> slots_;  // By tensor id - range_.first_tensor.
  std::vector<std::vector<int>> tensor_ids_;  // [layer][parameter].
  // Backward stops above it: the first stage's layers before its first
  // trainable one need no backward pass.
  int lowest_backward_ = 0;
  BufferPtr input_;
  BufferPtr grad_output_;
  std::unique_ptr<SoftmaxCrossEntropyLoss> loss_;
  BufferPtr predictions_;  // The last stage's, for Evaluate.
  std::vector<float> host_predictions_;
  std::vector<std::vector<float>> host_gradients_;

  bool forward_valid_ = false;
  Pass pass_;
  std::vector<const DeviceBuffer*> activations_;
};

absl::Status LayerStage::Init(const ModelDescription& description,
                              uint64_t seed) {
  const std::vector<LayerConfig>& configs = description.layers();
  ActivationShape input =
      range_.first_layer == 0
          ? description.input()
          : description.output_shapes()[range_.first_layer - 1];
  input_size_ = input.size();
  int first_trainable = range_.end_layer;
  for (int l = range_.first_layer; l < range_.end_layer; ++l) {
    if (Trainable(configs[l])) {
      first_trainable = l;
      break;
    }
  }
  // Only the first stage has no one to send d(loss)/d(input) to.
  lowest_backward_ = first() ? first_trainable - range_.first_layer : 0;
  const ModelSpec spec = description.Spec(seed);
  for (int l = range_.first_layer; l < range_.end_layer; ++l) {
    LayerOptions options;
    options.max_batch = max_batch_;
    options.input_gradient = !first() || l > first_trainable;
    options.dropout_seed = DropoutSeed(seed, l);
    absl::StatusOr<std::unique_ptr<Layer>> layer =
        CreateLayer(configs[l], input, options, backend_);
    if (!layer.ok()) return layer.status();
    tensor_ids_.emplace_back();
    for (int p = 0; p < (*layer)->num_parameters(); ++p) {
      const int id = range_.first_tensor + static_cast<int>(slots_.size());
      tensor_ids_.back().push_back(id);
      slots_.push_back({static_cast<int>(layers_.size()), p});
      if (id >= range_.end_tensor ||
          spec.tensors[id].num_elements() != (*layer)->parameter(p).size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "StageModel: tensor %d does not fit layer %d of the model", id, l));
      }
      host_gradients_.emplace_back((*layer)->parameter(p).size());
    }
    input = (*layer)->output_shape();
    layers_.push_back(*std::move(layer));
  }
  if (range_.first_tensor + static_cast<int>(slots_.size()) !=
      range_.end_tensor) {
    return absl::InvalidArgumentError(
        "StageModel: the range's tensors are not its layers'");
  }
  const size_t batch = max_batch_;
  PS_NN_RETURN_IF_ERROR(Allocate(*backend_, batch * input_size_, input_));
  if (last_) {
    absl::StatusOr<std::unique_ptr<SoftmaxCrossEntropyLoss>> loss =
        SoftmaxCrossEntropyLoss::Create(classes_, max_batch_, backend_);
    if (!loss.ok()) return loss.status();
    loss_ = *std::move(loss);
    PS_NN_RETURN_IF_ERROR(Allocate(*backend_, batch, predictions_));
    host_predictions_.resize(batch);
  } else {
    PS_NN_RETURN_IF_ERROR(
        Allocate(*backend_, batch * range_.output_size, grad_output_));
  }
  activations_.resize(layers_.size() + 1);
  return absl::OkStatus();
}

absl::Status LayerStage::SetWeights(int tensor_id,
                                    absl::Span<const float> values) {
  const int i = tensor_id - range_.first_tensor;
  if (i < 0 || i >= static_cast<int>(slots_.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StageModel: tensor %d is not in this stage's [%d, %d)",
                        tensor_id, range_.first_tensor, range_.end_tensor));
  }
  DeviceBuffer& buffer =
      layers_[slots_[i].layer]->parameter(slots_[i].parameter);
  if (values.size() != buffer.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StageModel: tensor %d has %d elements, got %d",
                        tensor_id, buffer.size(), values.size()));
  }
  for (size_t e = 0; e < values.size(); ++e) {
    if (!std::isfinite(values[e])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "StageModel: weight %d of tensor %d is %f", e, tensor_id, values[e]));
    }
  }
  forward_valid_ = false;
  return backend_->CopyToDevice(values.data(), values.size(), buffer, 0);
}

absl::Status LayerStage::CheckForward(absl::Span<const float> input,
                                      absl::Span<const float> labels, int rows,
                                      absl::Span<float> output) const {
  if (rows < 1 || rows > max_batch_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "StageModel: %d rows is not in [1, %d]", rows, max_batch_));
  }
  if (input.size() != static_cast<size_t>(rows) * input_size_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StageModel: %d rows need %d input floats, got %d",
                        rows, rows * input_size_, input.size()));
  }
  for (size_t i = 0; i < input.size(); ++i) {
    if (!std::isfinite(input[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("StageModel: input %d of row %d is %f",
                          i % input_size_, i / input_size_, input[i]));
    }
  }
  if (!last_) {
    if (output.size() != static_cast<size_t>(rows) * range_.output_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("StageModel: %d rows give %d output floats, not %d",
                          rows, rows * range_.output_size, output.size()));
    }
    return absl::OkStatus();
  }
  if (labels.size() != static_cast<size_t>(rows)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StageModel: %d rows need %d labels, got %d", rows,
                        rows, labels.size()));
  }
  for (int r = 0; r < rows; ++r) {
    const float l = labels[r];
    if (!(l >= 0.0f && l < static_cast<float>(classes_) &&
          l == std::floor(l))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "StageModel: label %f of row %d is not a class in [0, %d)", l, r,
          classes_));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<float> LayerStage::Forward(absl::Span<const float> input,
                                          absl::Span<const float> labels,
                                          int rows, const StepInfo& step,
                                          absl::Span<float> output) {
  PS_NN_RETURN_IF_ERROR(CheckForward(input, labels, rows, output));
  forward_valid_ = false;
  Pass pass;
  pass.batch = rows;
  pass.training = true;
  pass.step = step.step;
  pass.first_example = step.first_example;
  PS_NN_RETURN_IF_ERROR(
      backend_->CopyToDevice(input.data(), input.size(), *input_, 0));
  activations_[0] = input_.get();
  for (size_t l = 0; l < layers_.size(); ++l) {
    absl::StatusOr<const DeviceBuffer*> y =
        layers_[l]->Forward(pass, *activations_[l]);
    if (!y.ok()) return y.status();
    activations_[l + 1] = *y;
  }
  float loss = 0;
  if (last_) {
    absl::StatusOr<float> mean =
        loss_->Forward(rows, *activations_.back(), labels);
    if (!mean.ok()) return mean.status();
    if (!std::isfinite(*mean)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "StageModel: the loss is %f: training diverged", *mean));
    }
    loss = *mean;
  } else {
    PS_NN_RETURN_IF_ERROR(backend_->CopyToHost(*activations_.back(), 0,
                                               output.size(), output.data()));
  }
  pass_ = pass;
  forward_valid_ = true;
  return loss;
}

absl::Status LayerStage::Backward(absl::Span<const float> grad_output,
                                  const GradientCallback& on_gradient,
                                  absl::Span<float> grad_input) {
  if (!forward_valid_) {
    return absl::FailedPreconditionError(
        "StageModel: Backward needs a successful Forward first");
  }
  const size_t rows = pass_.batch;
  const size_t want_out = last_ ? 0 : rows * range_.output_size;
  const size_t want_in = first() ? 0 : rows * input_size_;
  if (grad_output.size() != want_out || grad_input.size() != want_in) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "StageModel: backward of %d rows takes %d and gives %d floats, not "
        "%d and %d",
        rows, want_out, want_in, grad_output.size(), grad_input.size()));
  }
  const DeviceBuffer* grad = nullptr;
  if (last_) {
    grad = &loss_->gradient();
  } else {
    PS_NN_RETURN_IF_ERROR(backend_->CopyToDevice(
        grad_output.data(), grad_output.size(), *grad_output_, 0));
    grad = grad_output_.get();
  }
  for (int l = static_cast<int>(layers_.size()) - 1; l >= lowest_backward_;
       --l) {
    Layer& layer = *layers_[l];
    const std::vector<int>& ids = tensor_ids_[l];
    auto ready = [&](int parameter) -> absl::Status {
      const int id = ids[parameter];
      std::vector<float>& host = host_gradients_[id - range_.first_tensor];
      PS_NN_RETURN_IF_ERROR(backend_->CopyToHost(
          layer.parameter_gradient(parameter), 0, host.size(), host.data()));
      return on_gradient ? on_gradient(id, host) : absl::OkStatus();
    };
    const bool want_x = l > lowest_backward_ || !first();
    absl::StatusOr<const DeviceBuffer*> grad_x =
        layer.Backward(pass_, *activations_[l], *grad, want_x, ready);
    if (!grad_x.ok()) return grad_x.status();
    grad = *grad_x;
  }
  if (!first()) {
    PS_NN_RETURN_IF_ERROR(
        backend_->CopyToHost(*grad, 0, grad_input.size(), grad_input.data()));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> LayerStage::Evaluate(absl::Span<const float> input,
                                             absl::Span<const float> labels,
                                             int rows,
                                             absl::Span<float> output) {
  PS_NN_RETURN_IF_ERROR(CheckForward(input, labels, rows, output));
  forward_valid_ = false;
  Pass pass;
  pass.batch = rows;
  pass.training = false;
  PS_NN_RETURN_IF_ERROR(
      backend_->CopyToDevice(input.data(), input.size(), *input_, 0));
  const DeviceBuffer* x = input_.get();
  for (const std::unique_ptr<Layer>& layer : layers_) {
    absl::StatusOr<const DeviceBuffer*> y = layer->Forward(pass, *x);
    if (!y.ok()) return y.status();
    x = *y;
  }
  if (!last_) {
    PS_NN_RETURN_IF_ERROR(
        backend_->CopyToHost(*x, 0, output.size(), output.data()));
    return 0;
  }
  PS_NN_RETURN_IF_ERROR(
      backend_->ArgmaxRows(rows, classes_, *x, *predictions_));
  PS_NN_RETURN_IF_ERROR(
      backend_->CopyToHost(*predictions_, 0, rows, host_predictions_.data()));
  int64_t correct = 0;
  for (int r = 0; r < rows; ++r) {
    if (host_predictions_[r] == labels[r]) ++correct;
  }
  return correct;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StageModel>> StageModel::Create(
    const ModelDescription& description, const StageRange& range,
    const ModelOptions& options, kernels::Backend* backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("StageModel: no backend");
  }
  if (options.max_batch < 1 || options.max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StageModel: max batch %d is not in [1, %d]",
                        options.max_batch, kMaxBatch));
  }
  const int n = static_cast<int>(description.layers().size());
  if (range.first_layer < 0 || range.first_layer >= range.end_layer ||
      range.end_layer > n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("StageModel: layers [%d, %d) are not a range of the "
                        "model's %d",
                        range.first_layer, range.end_layer, n));
  }
  auto stage =
      std::make_unique<LayerStage>(description, range, options, backend);
  PS_NN_RETURN_IF_ERROR(stage->Init(description, options.seed));
  return stage;
}

}  // namespace ps::worker::nn
