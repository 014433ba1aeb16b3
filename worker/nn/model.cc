#include "worker/nn/model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "worker/nn/layer.h"
#include "worker/nn/status_macros.h"

namespace ps::worker::nn {
namespace {

using kernels::DeviceBuffer;
using BufferPtr = std::unique_ptr<DeviceBuffer>;

constexpr int kMaxBatch = 1 << 20;

// A stack of layers ending in softmax cross-entropy.
class SequentialModel final : public Model {
 public:
  SequentialModel(const ModelDescription& description,
                  const ModelOptions& options, kernels::Backend* backend)
      : description_(description),
        spec_(description.Spec(options.seed)),
        max_batch_(options.max_batch),
        backend_(backend) {}

  absl::Status Init(uint64_t seed);

  const ModelSpec& spec() const override { return spec_; }
  int64_t example_size() const override { return description_.example_size(); }
  int num_classes() const override { return description_.num_classes(); }
  int max_batch() const override { return max_batch_; }

  absl::Status SetWeights(int tensor_id, absl::Span<const float> values,
                          int64_t offset) override;
  void SetTraining(bool training) override { training_ = training; }
  bool training() const override { return training_; }
  absl::StatusOr<float> Forward(absl::Span<const float> images,
                                absl::Span<const float> labels, int batch,
                                const StepInfo& step) override;
  absl::Status Backward(const GradientCallback& on_gradient) override;
  absl::StatusOr<absl::Span<const float>> Gradient(
      int tensor_id) const override;
  absl::StatusOr<int64_t> Evaluate(absl::Span<const float> images,
                                   absl::Span<const float> labels,
                                   int64_t n) override;
  absl::Status Predict(absl::Span<const float> images,
                       absl::Span<int> classes) override;

 private:
  // Where tensor `id` lives: parameter `parameter` of layers_[layer].
  struct TensorSlot {
    int layer = 0;
    int parameter = 0;
  };

  absl::Status CheckTensorRange(int tensor_id, int64_t offset,
                                size_t count) const;
  absl::Status CheckNotInBackward(absl::string_view method) const;
  absl::Status CheckImages(absl::Span<const float> images, int64_t n) const;
  absl::Status CheckLabels(absl::Span<const float> labels, int64_t n) const;
  // Uploads `pass.batch` examples and runs every layer; returns the logits.
  absl::StatusOr<const DeviceBuffer*> RunForward(const float* images,
                                                 const Pass& pass);
  absl::Status RunBackward(const GradientCallback& on_gradient);
  // Forward in evaluation mode, then the argmax of each row into
  // host_predictions_.
  absl::Status PredictChunk(const float* images, int rows);

  // Constant after Init.
  const ModelDescription description_;
  const ModelSpec spec_;
  const int max_batch_;
  kernels::Backend* const backend_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<TensorSlot> slots_;             // By tensor id.
  std::vector<std::vector<int>> tensor_ids_;  // [layer][parameter].
  int first_trainable_ = 0;  // Layers before it need no backward pass.

  std::unique_ptr<SoftmaxCrossEntropyLoss> loss_;
  BufferPtr input_;
  BufferPtr predictions_;
  std::vector<float> host_predictions_;
  std::vector<std::vector<float>> host_gradients_;  // By tensor id.
  std::vector<bool> reported_;

  bool training_ = true;
  // Set while Backward runs: its callback may not run or change the model,
  // whose buffers the rest of Backward still reads.
  bool in_backward_ = false;
  // The last Forward's pass and each layer's input ([l]) and the logits
  // (back()); valid while forward_valid_.
  bool forward_valid_ = false;
  Pass pass_;
  std::vector<const DeviceBuffer*> activations_;
};

absl::Status Allocate(kernels::Backend& backend, size_t n, BufferPtr& out) {
  absl::StatusOr<BufferPtr> buffer = backend.Allocate(n);
  if (!buffer.ok()) return buffer.status();
  out = *std::move(buffer);
  return absl::OkStatus();
}

absl::Status SequentialModel::Init(uint64_t seed) {
  const std::vector<LayerConfig>& configs = description_.layers();
  first_trainable_ = static_cast<int>(configs.size());
  for (size_t l = 0; l < configs.size(); ++l) {
    if (configs[l].kind == LayerKind::kConv ||
        configs[l].kind == LayerKind::kDense) {
      first_trainable_ = static_cast<int>(l);
      break;
    }
  }
  ActivationShape input = description_.input();
  for (size_t l = 0; l < configs.size(); ++l) {
    LayerOptions options;
    options.max_batch = max_batch_;
    options.input_gradient = static_cast<int>(l) > first_trainable_;
    options.dropout_seed = DropoutSeed(seed, static_cast<int>(l));
    absl::StatusOr<std::unique_ptr<Layer>> layer =
        CreateLayer(configs[l], input, options, backend_);
    if (!layer.ok()) return layer.status();
    tensor_ids_.emplace_back();
    for (int p = 0; p < (*layer)->num_parameters(); ++p) {
      tensor_ids_.back().push_back(static_cast<int>(slots_.size()));
      slots_.push_back({static_cast<int>(l), p});
    }
    input = (*layer)->output_shape();
    layers_.push_back(*std::move(layer));
  }
  // The layers and the declaration come from one description; a mismatch
  // is a bug here, not bad input.
  if (slots_.size() != spec_.tensors.size()) {
    return absl::InternalError("Model: layers and declaration disagree");
  }
  for (size_t id = 0; id < slots_.size(); ++id) {
    const size_t n = spec_.tensors[id].num_elements();
    if (layers_[slots_[id].layer]->parameter(slots_[id].parameter).size() !=
        n) {
      return absl::InternalError(
          absl::StrFormat("Model: tensor %d (%s) has a buffer of another size",
                          id, spec_.tensors[id].name));
    }
    host_gradients_.emplace_back(n);
  }
  reported_.assign(slots_.size(), false);
  const size_t batch = max_batch_;
  PS_NN_RETURN_IF_ERROR(Allocate(*backend_, batch * example_size(), input_));
  absl::StatusOr<std::unique_ptr<SoftmaxCrossEntropyLoss>> loss =
      SoftmaxCrossEntropyLoss::Create(num_classes(), max_batch_, backend_);
  if (!loss.ok()) return loss.status();
  loss_ = *std::move(loss);
  PS_NN_RETURN_IF_ERROR(Allocate(*backend_, batch, predictions_));
  host_predictions_.resize(batch);
  activations_.resize(layers_.size() + 1);
  return absl::OkStatus();
}

absl::Status SequentialModel::CheckTensorRange(int tensor_id, int64_t offset,
                                               size_t count) const {
  if (tensor_id < 0 || tensor_id >= static_cast<int>(spec_.tensors.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Model: tensor id %d is not in [0, %d)", tensor_id,
                        spec_.tensors.size()));
  }
  const TensorSpec& t = spec_.tensors[tensor_id];
  const int64_t size = t.num_elements();
  if (offset < 0 || offset > size ||
      count > static_cast<uint64_t>(size - offset)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Model: elements [%d, %d + %d) are outside tensor %d (%s) of %d "
        "elements",
        offset, offset, count, tensor_id, t.name, size));
  }
  return absl::OkStatus();
}

absl::Status SequentialModel::CheckNotInBackward(
    absl::string_view method) const {
  if (in_backward_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Model: %s called from a gradient callback, while Backward still "
        "needs the model as it is",
        method));
  }
  return absl::OkStatus();
}

absl::Status SequentialModel::SetWeights(int tensor_id,
                                         absl::Span<const float> values,
                                         int64_t offset) {
  PS_NN_RETURN_IF_ERROR(CheckNotInBackward("SetWeights"));
  PS_NN_RETURN_IF_ERROR(CheckTensorRange(tensor_id, offset, values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Model: weight %d of tensor %d (%s) is %f", offset + i, tensor_id,
          spec_.tensors[tensor_id].name, values[i]));
    }
  }
  forward_valid_ = false;
  const TensorSlot slot = slots_[tensor_id];
  return backend_->CopyToDevice(values.data(), values.size(),
                                layers_[slot.layer]->parameter(slot.parameter),
                                offset);
}

absl::Status SequentialModel::CheckImages(absl::Span<const float> images,
                                          int64_t n) const {
  const uint64_t want = static_cast<uint64_t>(n) * example_size();
  if (images.size() != want) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Model: %d examples need %d floats (%d each, %s), got %d", n, want,
        example_size(), description_.input().ToString(), images.size()));
  }
  for (size_t i = 0; i < images.size(); ++i) {
    if (!std::isfinite(images[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Model: pixel %d of example %d is %f",
                          i % example_size(), i / example_size(), images[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status SequentialModel::CheckLabels(absl::Span<const float> labels,
                                          int64_t n) const {
  if (labels.size() != static_cast<uint64_t>(n)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Model: %d examples need %d labels, got %d", n, n, labels.size()));
  }
  for (int64_t r = 0; r < n; ++r) {
    const float l = labels[r];
    if (!(l >= 0.0f && l < static_cast<float>(num_classes()) &&
          l == std::floor(l))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Model: label %f of example %d is not a class in "
                          "[0, %d)",
                          l, r, num_classes()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const DeviceBuffer*> SequentialModel::RunForward(
    const float* images, const Pass& pass) {
  forward_valid_ = false;
  PS_NN_RETURN_IF_ERROR(backend_->CopyToDevice(
      images, static_cast<size_t>(pass.batch) * example_size(), *input_, 0));
  activations_[0] = input_.get();
  for (size_t l = 0; l < layers_.size(); ++l) {
    absl::StatusOr<const DeviceBuffer*> y =
        layers_[l]->Forward(pass, *activations_[l]);
    if (!y.ok()) return y.status();
    activations_[l + 1] = *y;
  }
  return activations_.back();
}

absl::StatusOr<float> SequentialModel::Forward(absl::Span<const float> images,
                                               absl::Span<const float> labels,
                                               int batch,
                                               const StepInfo& step) {
  PS_NN_RETURN_IF_ERROR(CheckNotInBackward("Forward"));
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Model: batch %d is not in [1, %d]", batch, max_batch_));
  }
  PS_NN_RETURN_IF_ERROR(CheckImages(images, batch));
  PS_NN_RETURN_IF_ERROR(CheckLabels(labels, batch));
  Pass pass;
  pass.batch = batch;
  pass.training = training_;
  pass.step = step.step;
  pass.first_example = step.first_example;
  absl::StatusOr<const DeviceBuffer*> logits = RunForward(images.data(), pass);
  if (!logits.ok()) return logits.status();
  // Reading the loss waits for the device once per step, and keeps a
  // diverged step from producing gradients anyone could push.
  absl::StatusOr<float> loss = loss_->Forward(batch, **logits, labels);
  if (!loss.ok()) return loss.status();
  if (!std::isfinite(*loss)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Model: the loss is %f: training diverged (or weights overflow)",
        *loss));
  }
  pass_ = pass;
  forward_valid_ = true;
  return *loss;
}

absl::Status SequentialModel::Backward(const GradientCallback& on_gradient) {
  PS_NN_RETURN_IF_ERROR(CheckNotInBackward("Backward"));
  if (!forward_valid_) {
    return absl::FailedPreconditionError(
        "Model: Backward needs a successful Forward first (Evaluate, Predict "
        "and SetWeights discard it)");
  }
  std::fill(reported_.begin(), reported_.end(), false);
  in_backward_ = true;
  const absl::Status status = RunBackward(on_gradient);
  in_backward_ = false;
  return status;
}

absl::Status SequentialModel::RunBackward(const GradientCallback& on_gradient) {
  const DeviceBuffer* grad = &loss_->gradient();
  for (int l = static_cast<int>(layers_.size()) - 1; l >= first_trainable_;
       --l) {
    Layer& layer = *layers_[l];
    const std::vector<int>& ids = tensor_ids_[l];
    auto ready = [&](int parameter) -> absl::Status {
      const int id = ids[parameter];
      std::vector<float>& host = host_gradients_[id];
      PS_NN_RETURN_IF_ERROR(backend_->CopyToHost(
          layer.parameter_gradient(parameter), 0, host.size(), host.data()));
      reported_[id] = true;
      return on_gradient ? on_gradient(id, host) : absl::OkStatus();
    };
    absl::StatusOr<const DeviceBuffer*> grad_x = layer.Backward(
        pass_, *activations_[l], *grad, l > first_trainable_, ready);
    if (!grad_x.ok()) return grad_x.status();
    grad = *grad_x;
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> SequentialModel::Gradient(
    int tensor_id) const {
  PS_NN_RETURN_IF_ERROR(CheckTensorRange(tensor_id, 0, 0));
  if (!reported_[tensor_id]) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Model: the gradient of tensor %d (%s) was not reported by the last "
        "Backward",
        tensor_id, spec_.tensors[tensor_id].name));
  }
  return absl::Span<const float>(host_gradients_[tensor_id]);
}

absl::Status SequentialModel::PredictChunk(const float* images, int rows) {
  Pass pass;
  pass.batch = rows;
  absl::StatusOr<const DeviceBuffer*> logits = RunForward(images, pass);
  if (!logits.ok()) return logits.status();
  PS_NN_RETURN_IF_ERROR(
      backend_->ArgmaxRows(rows, num_classes(), **logits, *predictions_));
  return backend_->CopyToHost(*predictions_, 0, rows, host_predictions_.data());
}

absl::StatusOr<int64_t> SequentialModel::Evaluate(
    absl::Span<const float> images, absl::Span<const float> labels, int64_t n) {
  PS_NN_RETURN_IF_ERROR(CheckNotInBackward("Evaluate"));
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Model: cannot evaluate %d examples", n));
  }
  PS_NN_RETURN_IF_ERROR(CheckImages(images, n));
  PS_NN_RETURN_IF_ERROR(CheckLabels(labels, n));
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += max_batch_) {
    const int rows = static_cast<int>(std::min<int64_t>(max_batch_, n - start));
    PS_NN_RETURN_IF_ERROR(
        PredictChunk(images.data() + start * example_size(), rows));
    for (int r = 0; r < rows; ++r) {
      if (host_predictions_[r] == labels[start + r]) ++correct;
    }
  }
  return correct;
}

absl::Status SequentialModel::Predict(absl::Span<const float> images,
                                      absl::Span<int> classes) {
  PS_NN_RETURN_IF_ERROR(CheckNotInBackward("Predict"));
  const int64_t n = classes.size();
  PS_NN_RETURN_IF_ERROR(CheckImages(images, n));
  for (int64_t start = 0; start < n; start += max_batch_) {
    const int rows = static_cast<int>(std::min<int64_t>(max_batch_, n - start));
    PS_NN_RETURN_IF_ERROR(
        PredictChunk(images.data() + start * example_size(), rows));
    for (int r = 0; r < rows; ++r) {
      classes[start + r] = static_cast<int>(host_predictions_[r]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckModelArguments(absl::string_view caller,
                                 const ModelOptions& options,
                                 const kernels::Backend* backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(caller, ": no backend"));
  }
  if (options.max_batch < 1 || options.max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: max batch %d is not in [1, %d]", caller,
                        options.max_batch, kMaxBatch));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(
    const ModelDescription& description, const ModelOptions& options,
    kernels::Backend* backend) {
  PS_NN_RETURN_IF_ERROR(CheckModelArguments("CreateModel", options, backend));
  auto model = std::make_unique<SequentialModel>(description, options, backend);
  PS_NN_RETURN_IF_ERROR(model->Init(options.seed));
  return model;
}

}  // namespace ps::worker::nn
