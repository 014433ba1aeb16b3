#include "worker/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ps::worker {
namespace {

constexpr int kMaxBatch = 1 << 20;
constexpr int64_t kMaxLayerSize = 1 << 24;

std::string ShapeString(const TensorSpec& t) {
  return absl::StrCat("[", absl::StrJoin(t.shape, ", "), "]");
}

// Checks that `spec` chains fully connected layers and returns the layer
// sizes: input, hidden..., classes.
absl::StatusOr<std::vector<int>> LayerSizes(const ModelSpec& spec) {
  const std::vector<TensorSpec>& tensors = spec.tensors;
  if (tensors.empty() || tensors.size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp: the model has %d tensors; an MLP has a weight and a bias per "
        "layer and at least one layer",
        tensors.size()));
  }
  std::vector<int> sizes;
  for (size_t i = 0; i < tensors.size(); i += 2) {
    const TensorSpec& w = tensors[i];
    const TensorSpec& b = tensors[i + 1];
    const int64_t layer = i / 2;
    if (w.shape.size() != 2 || w.shape[0] < 1 || w.shape[1] < 1 ||
        w.shape[0] > kMaxLayerSize || w.shape[1] > kMaxLayerSize) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Mlp: tensor %d (%s) of shape %s should be the weight of layer %d, "
          "[in, out] with sizes in [1, %d]",
          i, w.name, ShapeString(w), layer, kMaxLayerSize));
    }
    if (b.shape.size() != 1 || b.shape[0] != w.shape[1]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Mlp: tensor %d (%s) of shape %s should be the bias of layer %d, "
          "[%d]",
          i + 1, b.name, ShapeString(b), layer, w.shape[1]));
    }
    if (i == 0) {
      sizes.push_back(static_cast<int>(w.shape[0]));
    } else if (w.shape[0] != sizes.back()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Mlp: tensor %d (%s) of shape %s takes %d inputs but layer %d "
          "outputs %d",
          i, w.name, ShapeString(w), w.shape[0], layer - 1, sizes.back()));
    }
    sizes.push_back(static_cast<int>(w.shape[1]));
  }
  return sizes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const ModelSpec& spec,
                                                 int max_batch,
                                                 kernels::Backend* backend) {
  if (backend == nullptr) {
    return absl::InvalidArgumentError("Mlp: no backend");
  }
  if (max_batch < 1 || max_batch > kMaxBatch) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp: max batch %d is not in [1, %d]", max_batch, kMaxBatch));
  }
  absl::StatusOr<std::vector<int>> sizes = LayerSizes(spec);
  if (!sizes.ok()) return sizes.status();
  std::unique_ptr<Mlp> mlp(
      new Mlp(spec, *std::move(sizes), max_batch, backend));
  if (absl::Status s = mlp->AllocateBuffers(); !s.ok()) return s;
  return mlp;
}

Mlp::Mlp(const ModelSpec& spec, std::vector<int> layer_sizes, int max_batch,
         kernels::Backend* backend)
    : spec_(spec),
      layer_sizes_(std::move(layer_sizes)),
      max_batch_(max_batch),
      backend_(backend),
      host_predictions_(max_batch),
      gradient_ready_(spec.tensors.size(), false) {}

absl::Status Mlp::AllocateBuffers() {
  const size_t batch = max_batch_;
  auto allocate = [this](size_t n,
                         std::unique_ptr<kernels::DeviceBuffer>& buffer) {
    absl::StatusOr<std::unique_ptr<kernels::DeviceBuffer>> b =
        backend_->Allocate(n);
    if (!b.ok()) return b.status();
    buffer = *std::move(b);
    return absl::OkStatus();
  };
  // Weights start at zero on every backend, whatever Allocate leaves there.
  size_t largest = 0;
  for (const TensorSpec& t : spec_.tensors) {
    largest = std::max<size_t>(largest, t.num_elements());
  }
  const std::vector<float> zeros(largest, 0.0f);
  layers_.resize(layer_sizes_.size() - 1);
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    layer.in = layer_sizes_[l];
    layer.out = layer_sizes_[l + 1];
    const size_t weights = static_cast<size_t>(layer.in) * layer.out;
    for (auto [buffer, n] :
         {std::make_pair(&layer.weight, weights),
          std::make_pair(&layer.bias, size_t(layer.out)),
          std::make_pair(&layer.weight_grad, weights),
          std::make_pair(&layer.bias_grad, size_t(layer.out)),
          std::make_pair(&layer.output, batch * layer.out),
          std::make_pair(&layer.delta, batch * layer.out)}) {
      if (absl::Status s = allocate(n, *buffer); !s.ok()) return s;
    }
    for (auto* params : {layer.weight.get(), layer.bias.get()}) {
      if (absl::Status s =
              backend_->CopyToDevice(zeros.data(), params->size(), *params, 0);
          !s.ok()) {
        return s;
      }
    }
  }
  for (auto [buffer, n] :
       {std::make_pair(&input_, batch * input_size()),
        std::make_pair(&labels_, batch), std::make_pair(&loss_, size_t{1}),
        std::make_pair(&predictions_, batch)}) {
    if (absl::Status s = allocate(n, *buffer); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Mlp::CheckTensorRange(int tensor_id, int64_t offset,
                                   size_t count) const {
  if (tensor_id < 0 || tensor_id >= num_tensors()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp: tensor id %d is not in [0, %d)", tensor_id, num_tensors()));
  }
  const TensorSpec& t = spec_.tensors[tensor_id];
  const int64_t size = t.num_elements();
  if (offset < 0 || offset > size ||
      count > static_cast<uint64_t>(size - offset)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp: elements [%d, %d + %d) are outside tensor %d (%s) of %d "
        "elements",
        offset, offset, count, tensor_id, t.name, size));
  }
  return absl::OkStatus();
}

kernels::DeviceBuffer& Mlp::TensorBuffer(int tensor_id, bool gradient) {
  Layer& layer = layers_[tensor_id / 2];
  if (tensor_id % 2 == 0) return gradient ? *layer.weight_grad : *layer.weight;
  return gradient ? *layer.bias_grad : *layer.bias;
}

absl::Status Mlp::SetWeights(int tensor_id, absl::Span<const float> values,
                             int64_t offset) {
  if (absl::Status s = CheckTensorRange(tensor_id, offset, values.size());
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Mlp: weight %d of tensor %d (%s) is %f", offset + i,
                          tensor_id, spec_.tensors[tensor_id].name, values[i]));
    }
  }
  return backend_->CopyToDevice(values.data(), values.size(),
                                TensorBuffer(tensor_id, /*gradient=*/false),
                                offset);
}

absl::Status Mlp::GetGradient(int tensor_id, absl::Span<float> out,
                              int64_t offset) {
  if (absl::Status s = CheckTensorRange(tensor_id, offset, out.size());
      !s.ok()) {
    return s;
  }
  if (!gradient_ready_[tensor_id]) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Mlp: the gradient of tensor %d (%s) is not computed; run "
        "ForwardBackward first",
        tensor_id, spec_.tensors[tensor_id].name));
  }
  return backend_->CopyToHost(TensorBuffer(tensor_id, /*gradient=*/true),
                              offset, out.size(), out.data());
}

absl::Status Mlp::CheckExamples(absl::Span<const float> images,
                                absl::Span<const float> labels, int n) const {
  const uint64_t want_pixels = static_cast<uint64_t>(n) * input_size();
  if (images.size() != want_pixels || labels.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Mlp: %d examples need %d pixels (%d each) and %d labels, got %d "
        "pixels and %d labels",
        n, want_pixels, input_size(), n, images.size(), labels.size()));
  }
  for (size_t i = 0; i < images.size(); ++i) {
    if (!std::isfinite(images[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Mlp: pixel %d of example %d is %f", i % input_size(),
                          i / input_size(), images[i]));
    }
  }
  for (int r = 0; r < n; ++r) {
    const float l = labels[r];
    if (!(l >= 0.0f && l < static_cast<float>(num_classes()) &&
          l == std::floor(l))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Mlp: label %f of example %d is not a class in "
                          "[0, %d)",
                          l, r, num_classes()));
    }
  }
  return absl::OkStatus();
}

absl::Status Mlp::Forward(const float* images, int batch) {
  if (absl::Status s = backend_->CopyToDevice(
          images, static_cast<size_t>(batch) * input_size(), *input_, 0);
      !s.ok()) {
    return s;
  }
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    if (absl::Status s =
            backend_->Gemm(false, false, batch, layer.out, layer.in, 1.0f,
                           LayerInput(l), *layer.weight, 0.0f, *layer.output);
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            backend_->AddBias(batch, layer.out, *layer.bias, *layer.output);
        !s.ok()) {
      return s;
    }
    if (l + 1 < layers_.size()) {
      if (absl::Status s =
              backend_->Relu(static_cast<size_t>(batch) * layer.out,
                             *layer.output, *layer.output);
          !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<float> Mlp::ForwardBackward(
    absl::Span<const float> images, absl::Span<const float> labels, int batch,
    const GradientReadyCallback& on_gradient_ready) {
  if (batch < 1 || batch > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Mlp: batch %d is not in [1, %d]", batch, max_batch_));
  }
  if (absl::Status s = CheckExamples(images, labels, batch); !s.ok()) return s;
  std::fill(gradient_ready_.begin(), gradient_ready_.end(), false);
  if (absl::Status s = Forward(images.data(), batch); !s.ok()) return s;
  if (absl::Status s =
          backend_->CopyToDevice(labels.data(), batch, *labels_, 0);
      !s.ok()) {
    return s;
  }
  Layer& last = layers_.back();
  if (absl::Status s = backend_->SoftmaxCrossEntropy(
          batch, last.out, *last.output, *labels_, *loss_, *last.delta);
      !s.ok()) {
    return s;
  }
  // Waiting for the loss costs one synchronization, and keeps a diverged
  // step from producing gradients anyone could push.
  float loss = 0.0f;
  if (absl::Status s = backend_->CopyToHost(*loss_, 0, 1, &loss); !s.ok()) {
    return s;
  }
  if (!std::isfinite(loss)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Mlp: the loss is %f: training diverged (or weights overflow); no "
        "gradients computed",
        loss));
  }
  if (absl::Status s = Backward(batch, on_gradient_ready); !s.ok()) return s;
  return loss;
}

absl::Status Mlp::Backward(int batch,
                           const GradientReadyCallback& on_gradient_ready) {
  for (int l = static_cast<int>(layers_.size()) - 1; l >= 0; --l) {
    Layer& layer = layers_[l];
    // layer.delta holds d(loss)/d(pre-activation output) here.
    if (absl::Status s = backend_->ColumnSum(batch, layer.out, *layer.delta,
                                             *layer.bias_grad);
        !s.ok()) {
      return s;
    }
    gradient_ready_[2 * l + 1] = true;
    if (on_gradient_ready) on_gradient_ready(2 * l + 1);
    // dW = input^T * delta: [in x batch] * [batch x out].
    if (absl::Status s = backend_->Gemm(true, false, layer.in, layer.out, batch,
                                        1.0f, LayerInput(l), *layer.delta, 0.0f,
                                        *layer.weight_grad);
        !s.ok()) {
      return s;
    }
    gradient_ready_[2 * l] = true;
    if (on_gradient_ready) on_gradient_ready(2 * l);
    if (l == 0) break;
    // d(input) = delta * W^T, then through the previous layer's ReLU.
    Layer& previous = layers_[l - 1];
    if (absl::Status s =
            backend_->Gemm(false, true, batch, layer.in, layer.out, 1.0f,
                           *layer.delta, *layer.weight, 0.0f, *previous.delta);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = backend_->ReluGrad(
            static_cast<size_t>(batch) * layer.in, *previous.output,
            *previous.delta, *previous.delta);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Mlp::Evaluate(absl::Span<const float> images,
                                  absl::Span<const float> labels, int n) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Mlp: cannot evaluate %d examples", n));
  }
  if (absl::Status s = CheckExamples(images, labels, n); !s.ok()) return s;
  int correct = 0;
  for (int start = 0; start < n; start += max_batch_) {
    const int rows = std::min(max_batch_, n - start);
    if (absl::Status s = Forward(
            images.data() + static_cast<size_t>(start) * input_size(), rows);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = backend_->ArgmaxRows(
            rows, num_classes(), *layers_.back().output, *predictions_);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = backend_->CopyToHost(*predictions_, 0, rows,
                                              host_predictions_.data());
        !s.ok()) {
      return s;
    }
    for (int r = 0; r < rows; ++r) {
      if (host_predictions_[r] == labels[start + r]) ++correct;
    }
  }
  return correct;
}

}  // namespace ps::worker
