#ifndef PS_KERNELS_CUDA_BACKEND_INTERNAL_H_
#define PS_KERNELS_CUDA_BACKEND_INTERNAL_H_

// Internal to the CUDA backend: the Backend class behind CreateCudaBackend
// (kernels/cuda_backend.h states its semantics), declared here so that its
// operations can be defined by idea in separate files. Include only from
// CUDA-enabled sources of //kernels:cuda_backend.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"
#include "kernels/cuda_conv.h"
#include "kernels/cuda_util.h"

namespace ps::kernels::cuda {

// One buffer argument of an operation and the floats its shape needs.
struct Arg {
  absl::string_view name;
  const DeviceBuffer* buffer;
  uint64_t needed;
};

// The checked buffers of one operation (at most four).
using Buffers = absl::InlinedVector<const CudaBuffer*, 4>;

// Not thread-safe (one thread at a time, as for any Backend).
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  ~CudaBackend() override;

  // Creates the streams, cuBLAS handle and label-check state on `device`.
  absl::Status Init();

  // Device memory, copies and synchronization (cuda_backend.cc).
  std::string name() const override;
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      size_t num_elements) override;
  absl::Status CopyToDevice(const float* host, size_t num_elements,
                            DeviceBuffer& dst, size_t dst_offset) override;
  absl::Status CopyToHost(const DeviceBuffer& src, size_t src_offset,
                          size_t num_elements, float* host) override;
  absl::Status Synchronize() override;

  // The dense layer, activation and loss over cuBLAS and our kernels
  // (cuda_dense_ops.cc).
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    float alpha, const DeviceBuffer& a, const DeviceBuffer& b,
                    float beta, DeviceBuffer& c) override;
  absl::Status AddBias(int rows, int cols, const DeviceBuffer& bias,
                       DeviceBuffer& y) override;
  absl::Status Relu(size_t n, const DeviceBuffer& x, DeviceBuffer& y) override;
  absl::Status ReluGrad(size_t n, const DeviceBuffer& activation,
                        const DeviceBuffer& grad_y,
                        DeviceBuffer& grad_x) override;
  absl::Status SoftmaxCrossEntropy(int rows, int cols,
                                   const DeviceBuffer& logits,
                                   const DeviceBuffer& labels,
                                   DeviceBuffer& loss,
                                   DeviceBuffer& grad_logits) override;
  absl::Status ColumnSum(int rows, int cols, const DeviceBuffer& x,
                         DeviceBuffer& out) override;
  absl::Status ArgmaxRows(int rows, int cols, const DeviceBuffer& x,
                          DeviceBuffer& out) override;

  // Convolution, channel bias, pooling and dropout (cuda_cnn_ops.cc).
  absl::Status Conv2dForward(const Conv2dShape& shape, const DeviceBuffer& x,
                             const DeviceBuffer& weights,
                             DeviceBuffer& y) override;
  absl::Status Conv2dBackwardData(const Conv2dShape& shape,
                                  const DeviceBuffer& grad_y,
                                  const DeviceBuffer& weights,
                                  DeviceBuffer& grad_x) override;
  absl::Status Conv2dBackwardFilter(const Conv2dShape& shape,
                                    const DeviceBuffer& x,
                                    const DeviceBuffer& grad_y,
                                    DeviceBuffer& grad_weights) override;
  absl::Status AddChannelBias(int batch, int channels, int spatial,
                              const DeviceBuffer& bias,
                              DeviceBuffer& y) override;
  absl::Status ChannelBiasGrad(int batch, int channels, int spatial,
                               const DeviceBuffer& grad_y,
                               DeviceBuffer& grad_bias) override;
  absl::Status MaxPool2dForward(const Pool2dShape& shape, const DeviceBuffer& x,
                                DeviceBuffer& y, DeviceBuffer& argmax) override;
  absl::Status MaxPool2dBackward(const Pool2dShape& shape,
                                 const DeviceBuffer& grad_y,
                                 const DeviceBuffer& argmax,
                                 DeviceBuffer& grad_x) override;
  absl::Status AvgPool2dForward(const Pool2dShape& shape, const DeviceBuffer& x,
                                DeviceBuffer& y) override;
  absl::Status AvgPool2dBackward(const Pool2dShape& shape,
                                 const DeviceBuffer& grad_y,
                                 DeviceBuffer& grad_x) override;
  absl::Status DropoutForward(size_t n, const DropoutMask& mask,
                              const DeviceBuffer& x, DeviceBuffer& y) override;
  absl::Status DropoutBackward(size_t n, const DropoutMask& mask,
                               const DeviceBuffer& grad_y,
                               DeviceBuffer& grad_x) override;

 private:
  // The buffer as ours, if this backend allocated it and it holds at least
  // `needed` floats. Another backend's memory may not be device memory.
  absl::StatusOr<const CudaBuffer*> Check(absl::string_view op,
                                          absl::string_view arg,
                                          const DeviceBuffer& buffer,
                                          uint64_t needed) const;

  absl::StatusOr<Buffers> CheckAll(absl::string_view op,
                                   std::initializer_list<Arg> args) const;

  // Enqueues `launch` (returning a cudaError_t) on the compute stream,
  // ordered against the copies of `buffers`.
  template <typename Launch>
  absl::Status Enqueue(const Buffers& buffers, absl::string_view launcher,
                       Launch launch) {
    if (absl::Status s = BeforeCompute(buffers); !s.ok()) return s;
    if (const cudaError_t error = launch(); error != cudaSuccess) {
      cudaGetLastError();  // Reported here; not again by the next launch.
      return cuda::CudaError(error, launcher);
    }
    return AfterCompute(buffers);
  }

  absl::StatusOr<const CudaBuffer*> CheckRange(absl::string_view op,
                                               const float* host,
                                               size_t num_elements,
                                               const DeviceBuffer& buffer,
                                               size_t offset) const;

  // Compute on `buffers` waits for copies still writing or reading them.
  // Also selects the device, which every operation needs first.
  absl::Status BeforeCompute(const Buffers& buffers);

  absl::Status AfterCompute(const Buffers& buffers);

  // A copy of `buffer` waits only for the compute on that buffer.
  absl::Status BeforeCopy(const CudaBuffer& buffer);

  absl::Status AfterCopy(const CudaBuffer& buffer);

  // CheckAll, then that the last argument (the output) is none of the others.
  absl::StatusOr<Buffers> CheckOutput(absl::string_view op,
                                      std::initializer_list<Arg> args) const;

  // `run` enqueues a convolution pass (which may allocate scratch, so the
  // device is selected first) ordered against the copies of `buffers`.
  template <typename Run>
  absl::Status RunConv(const Buffers& buffers, Run run) {
    if (absl::Status s = BeforeCompute(buffers); !s.ok()) return s;
    if (absl::Status s = run(); !s.ok()) return s;
    return AfterCompute(buffers);
  }

  struct DropoutNames {
    absl::string_view op, in, out;
  };

  // Both directions apply the same mask; only the names differ.
  absl::Status Dropout(const DropoutNames& names, size_t n,
                       const DropoutMask& mask, const DeviceBuffer& in,
                       DeviceBuffer& out);

  // Reports a bad label seen by a SoftmaxCrossEntropy whose verdict has
  // arrived: waiting for it when `wait`, else only if it already has.
  absl::Status CheckLabels(bool wait);

  const int device_;
  // Declared before what uses them, so they are destroyed last.
  cuda::Stream compute_;   // Every operation, in issue order.
  cuda::Stream copy_;      // Host <-> device copies.
  cuda::Cublas cublas_;    // Bound to compute_.
  cuda::ConvRunner conv_;  // On compute_ through cublas_; owns its scratch.

  cuda::StagingBuffer upload_;    // Host -> device copies.
  cuda::StagingBuffer download_;  // Device -> host copies.

  DeviceArray<float> row_loss_;  // SoftmaxCrossEntropy scratch.
  size_t row_loss_capacity_ = 0;
  DeviceArray<int> bad_row_;       // 1 + a row with a bad label, or 0.
  PinnedArray<int> bad_row_host_;  // Its copy, valid after the event below.
  Event label_check_done_;
  bool label_check_pending_ = false;
  int label_check_cols_ = 0;
};

}  // namespace ps::kernels::cuda

#endif  // PS_KERNELS_CUDA_BACKEND_INTERNAL_H_
