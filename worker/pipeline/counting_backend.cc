#include "worker/pipeline/counting_backend.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace ps::worker::pipeline {
namespace {

// What a measuring CountingBackend hands out: a size, no memory.
class SizeOnlyBuffer final : public kernels::DeviceBuffer {
 public:
  explicit SizeOnlyBuffer(size_t size) : size_(size) {}
  float* data() override { return nullptr; }
  const float* data() const override { return nullptr; }
  size_t size() const override { return size_; }

 private:
  const size_t size_;
};

}  // namespace

std::string CountingBackend::name() const {
  return inner_ != nullptr ? inner_->name() : "counting";
}

absl::StatusOr<std::unique_ptr<kernels::DeviceBuffer>>
CountingBackend::Allocate(size_t num_elements) {
  std::unique_ptr<kernels::DeviceBuffer> buffer;
  if (inner_ == nullptr) {
    buffer = std::make_unique<SizeOnlyBuffer>(num_elements);
  } else {
    absl::StatusOr<std::unique_ptr<kernels::DeviceBuffer>> made =
        inner_->Allocate(num_elements);
    if (!made.ok()) return made.status();
    buffer = *std::move(made);
  }
  allocated_bytes_ += static_cast<int64_t>(buffer->size() * sizeof(float));
  return buffer;
}

absl::Status CountingBackend::CopyToDevice(const float* host,
                                           size_t num_elements,
                                           kernels::DeviceBuffer& dst,
                                           size_t dst_offset) {
  return inner_ != nullptr
             ? inner_->CopyToDevice(host, num_elements, dst, dst_offset)
             : absl::OkStatus();
}

absl::Status CountingBackend::CopyToHost(const kernels::DeviceBuffer& src,
                                         size_t src_offset, size_t num_elements,
                                         float* host) {
  return inner_ != nullptr
             ? inner_->CopyToHost(src, src_offset, num_elements, host)
             : absl::OkStatus();
}

absl::Status CountingBackend::Gemm(bool trans_a, bool trans_b, int m, int n,
                                   int k, float alpha,
                                   const kernels::DeviceBuffer& a,
                                   const kernels::DeviceBuffer& b, float beta,
                                   kernels::DeviceBuffer& c) {
  return inner_ != nullptr
             ? inner_->Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c)
             : absl::OkStatus();
}

absl::Status CountingBackend::AddBias(int rows, int cols,
                                      const kernels::DeviceBuffer& bias,
                                      kernels::DeviceBuffer& y) {
  return inner_ != nullptr ? inner_->AddBias(rows, cols, bias, y)
                           : absl::OkStatus();
}

absl::Status CountingBackend::Relu(size_t n, const kernels::DeviceBuffer& x,
                                   kernels::DeviceBuffer& y) {
  return inner_ != nullptr ? inner_->Relu(n, x, y) : absl::OkStatus();
}

absl::Status CountingBackend::ReluGrad(size_t n,
                                       const kernels::DeviceBuffer& activation,
                                       const kernels::DeviceBuffer& grad_y,
                                       kernels::DeviceBuffer& grad_x) {
  return inner_ != nullptr ? inner_->ReluGrad(n, activation, grad_y, grad_x)
                           : absl::OkStatus();
}

absl::Status CountingBackend::SoftmaxCrossEntropy(
    int rows, int cols, const kernels::DeviceBuffer& logits,
    const kernels::DeviceBuffer& labels, kernels::DeviceBuffer& loss,
    kernels::DeviceBuffer& grad_logits) {
  return inner_ != nullptr ? inner_->SoftmaxCrossEntropy(
                                 rows, cols, logits, labels, loss, grad_logits)
                           : absl::OkStatus();
}

absl::Status CountingBackend::ColumnSum(int rows, int cols,
                                        const kernels::DeviceBuffer& x,
                                        kernels::DeviceBuffer& out) {
  return inner_ != nullptr ? inner_->ColumnSum(rows, cols, x, out)
                           : absl::OkStatus();
}

absl::Status CountingBackend::ArgmaxRows(int rows, int cols,
                                         const kernels::DeviceBuffer& x,
                                         kernels::DeviceBuffer& out) {
  return inner_ != nullptr ? inner_->ArgmaxRows(rows, cols, x, out)
                           : absl::OkStatus();
}

absl::Status CountingBackend::Conv2dForward(
    const kernels::Conv2dShape& shape, const kernels::DeviceBuffer& x,
    const kernels::DeviceBuffer& weights, kernels::DeviceBuffer& y) {
  return inner_ != nullptr ? inner_->Conv2dForward(shape, x, weights, y)
                           : absl::OkStatus();
}

absl::Status CountingBackend::Conv2dBackwardData(
    const kernels::Conv2dShape& shape, const kernels::DeviceBuffer& grad_y,
    const kernels::DeviceBuffer& weights, kernels::DeviceBuffer& grad_x) {
  return inner_ != nullptr
             ? inner_->Conv2dBackwardData(shape, grad_y, weights, grad_x)
             : absl::OkStatus();
}

absl::Status CountingBackend::Conv2dBackwardFilter(
    const kernels::Conv2dShape& shape, const kernels::DeviceBuffer& x,
    const kernels::DeviceBuffer& grad_y, kernels::DeviceBuffer& grad_weights) {
  return inner_ != nullptr
             ? inner_->Conv2dBackwardFilter(shape, x, grad_y, grad_weights)
             : absl::OkStatus();
}

absl::Status CountingBackend::AddChannelBias(int batch, int channels,
                                             int spatial,
                                             const kernels::DeviceBuffer& bias,
                                             kernels::DeviceBuffer& y) {
  return inner_ != nullptr
             ? inner_->AddChannelBias(batch, channels, spatial, bias, y)
             : absl::OkStatus();
}

absl::Status CountingBackend::ChannelBiasGrad(
    int batch, int channels, int spatial, const kernels::DeviceBuffer& grad_y,
    kernels::DeviceBuffer& grad_bias) {
  return inner_ != nullptr ? inner_->ChannelBiasGrad(batch, channels, spatial,
                                                     grad_y, grad_bias)
                           : absl::OkStatus();
}

absl::Status CountingBackend::MaxPool2dForward(
    const kernels::Pool2dShape& shape, const kernels::DeviceBuffer& x,
    kernels::DeviceBuffer& y, kernels::DeviceBuffer& argmax) {
  return inner_ != nullptr ? inner_->MaxPool2dForward(shape, x, y, argmax)
                           : absl::OkStatus();
}

absl::Status CountingBackend::MaxPool2dBackward(
    const kernels::Pool2dShape& shape, const kernels::DeviceBuffer& grad_y,
    const kernels::DeviceBuffer& argmax, kernels::DeviceBuffer& grad_x) {
  return inner_ != nullptr
             ? inner_->MaxPool2dBackward(shape, grad_y, argmax, grad_x)
             : absl::OkStatus();
}

absl::Status CountingBackend::AvgPool2dForward(
    const kernels::Pool2dShape& shape, const kernels::DeviceBuffer& x,
    kernels::DeviceBuffer& y) {
  return inner_ != nullptr ? inner_->AvgPool2dForward(shape, x, y)
                           : absl::OkStatus();
}

absl::Status CountingBackend::AvgPool2dBackward(
    const kernels::Pool2dShape& shape, const kernels::DeviceBuffer& grad_y,
    kernels::DeviceBuffer& grad_x) {
  return inner_ != nullptr ? inner_->AvgPool2dBackward(shape, grad_y, grad_x)
                           : absl::OkStatus();
}

absl::Status CountingBackend::DropoutForward(size_t n,
                                             const kernels::DropoutMask& mask,
                                             const kernels::DeviceBuffer& x,
                                             kernels::DeviceBuffer& y) {
  return inner_ != nullptr ? inner_->DropoutForward(n, mask, x, y)
                           : absl::OkStatus();
}

absl::Status CountingBackend::DropoutBackward(
    size_t n, const kernels::DropoutMask& mask,
    const kernels::DeviceBuffer& grad_y, kernels::DeviceBuffer& grad_x) {
  return inner_ != nullptr ? inner_->DropoutBackward(n, mask, grad_y, grad_x)
                           : absl::OkStatus();
}

absl::Status CountingBackend::Synchronize() {
  return inner_ != nullptr ? inner_->Synchronize() : absl::OkStatus();
}

int64_t CountingBackend::ConvScratchBytes(
    const kernels::Conv2dShape& shape) const {
  // Without a backend, the CPU backend's im2col matrix (kernels/
  // cpu_backend.h): the worker a budget is checked for before it starts.
  return inner_ != nullptr
             ? inner_->ConvScratchBytes(shape)
             : static_cast<int64_t>(shape.im2col_size() * sizeof(float));
}

int64_t CountingBackend::conv_scratch_bytes() const {
  return inner_ != nullptr ? inner_->conv_scratch_bytes() : 0;
}

}  // namespace ps::worker::pipeline
