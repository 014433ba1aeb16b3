#ifndef PS_WORKER_PIPELINE_COUNTING_BACKEND_H_
#define PS_WORKER_PIPELINE_COUNTING_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace ps::worker::pipeline {

// A backend that counts the bytes of every buffer allocated through it, for
// a worker's memory budget (memory_budget.h): the figure is what the model
// actually asked for, not a formula beside it.
//
// Over a real backend (`inner`, borrowed) it hands out the inner backend's
// own buffers and forwards every operation. Without one (`inner` null) it
// allocates nothing: its buffers only know their size (data() is null) and
// every operation succeeds doing nothing, so that a model of any size can
// be built to be measured, at no cost.
//
// Counts allocations, not frees: a model allocates its buffers once, when
// it is built. Thread safety: that of `inner` (one thread at a time).
class CountingBackend final : public kernels::Backend {
 public:
  explicit CountingBackend(kernels::Backend* inner) : inner_(inner) {}

  // Bytes of every buffer allocated so far.
  int64_t allocated_bytes() const { return allocated_bytes_; }

  std::string name() const override;
  absl::StatusOr<std::unique_ptr<kernels::DeviceBuffer>> Allocate(
      size_t num_elements) override;
  absl::Status CopyToDevice(const float* host, size_t num_elements,
                            kernels::DeviceBuffer& dst,
                            size_t dst_offset) override;
  absl::Status CopyToHost(const kernels::DeviceBuffer& src, size_t src_offset,
                          size_t num_elements, float* host) override;
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const kernels::DeviceBuffer& a,
                    const kernels::DeviceBuffer& b, float beta,
                    kernels::DeviceBuffer& c) override;
  absl::Status AddBias(int rows, int cols, const kernels::DeviceBuffer& bias,
                       kernels::DeviceBuffer& y) override;
  absl::Status Relu(size_t n, const kernels::DeviceBuffer& x,
                    kernels::DeviceBuffer& y) override;
  absl::Status ReluGrad(size_t n, const kernels::DeviceBuffer& activation,
                        const kernels::DeviceBuffer& grad_y,
                        kernels::DeviceBuffer& grad_x) override;
  absl::Status SoftmaxCrossEntropy(int rows, int cols,
                                   const kernels::DeviceBuffer& logits,
                                   const kernels::DeviceBuffer& labels,
                                   kernels::DeviceBuffer& loss,
                                   kernels::DeviceBuffer& grad_logits) override;
  absl::Status ColumnSum(int rows, int cols, const kernels::DeviceBuffer& x,
                         kernels::DeviceBuffer& out) override;
  absl::Status ArgmaxRows(int rows, int cols, const kernels::DeviceBuffer& x,
                          kernels::DeviceBuffer& out) override;
  absl::Status Conv2dForward(const kernels::Conv2dShape& shape,
                             const kernels::DeviceBuffer& x,
                             const kernels::DeviceBuffer& weights,
                             kernels::DeviceBuffer& y) override;
  absl::Status Conv2dBackwardData(const kernels::Conv2dShape& shape,
                                  const kernels::DeviceBuffer& grad_y,
                                  const kernels::DeviceBuffer& weights,
                                  kernels::DeviceBuffer& grad_x) override;
  absl::Status Conv2dBackwardFilter(
      const kernels::Conv2dShape& shape, const kernels::DeviceBuffer& x,
      const kernels::DeviceBuffer& grad_y,
      kernels::DeviceBuffer& grad_weights) override;
  absl::Status AddChannelBias(int batch, int channels, int spatial,
                              const kernels::DeviceBuffer& bias,
                              kernels::DeviceBuffer& y) override;
  absl::Status ChannelBiasGrad(int batch, int channels, int spatial,
                               const kernels::DeviceBuffer& grad_y,
                               kernels::DeviceBuffer& grad_bias) override;
  absl::Status MaxPool2dForward(const kernels::Pool2dShape& shape,
                                const kernels::DeviceBuffer& x,
                                kernels::DeviceBuffer& y,
                                kernels::DeviceBuffer& argmax) override;
  absl::Status MaxPool2dBackward(const kernels::Pool2dShape& shape,
                                 const kernels::DeviceBuffer& grad_y,
                                 const kernels::DeviceBuffer& argmax,
                                 kernels::DeviceBuffer& grad_x) override;
  absl::Status AvgPool2dForward(const kernels::Pool2dShape& shape,
                                const kernels::DeviceBuffer& x,
                                kernels::DeviceBuffer& y) override;
  absl::Status AvgPool2dBackward(const kernels::Pool2dShape& shape,
                                 const kernels::DeviceBuffer& grad_y,
                                 kernels::DeviceBuffer& grad_x) override;
  absl::Status DropoutForward(size_t n, const kernels::DropoutMask& mask,
                              const kernels::DeviceBuffer& x,
                              kernels::DeviceBuffer& y) override;
  absl::Status DropoutBackward(size_t n, const kernels::DropoutMask& mask,
                               const kernels::DeviceBuffer& grad_y,
                               kernels::DeviceBuffer& grad_x) override;
  absl::Status Synchronize() override;
  // The inner backend's; without one, the CPU backend's.
  int64_t ConvScratchBytes(const kernels::Conv2dShape& shape) const override;
  int64_t conv_scratch_bytes() const override;

 private:
  kernels::Backend* const inner_;
  int64_t allocated_bytes_ = 0;
};

}  // namespace ps::worker::pipeline

#endif  // PS_WORKER_PIPELINE_COUNTING_BACKEND_H_
