// The CUDA backend's fully connected layer, activation and loss: Gemm
// through cuBLAS, the rest as launches of kernels/cuda_kernels.cu, and the
// deferred report of a bad label.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda_backend_internal.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_util.h"
#include "kernels/shape_checks.h"

namespace ps::kernels::cuda {

absl::Status CudaBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                               float alpha, const DeviceBuffer& a,
                               const DeviceBuffer& b, float beta,
                               DeviceBuffer& c) {
  if (absl::Status s = CheckGemmShape(m, n, k, a, b, c); !s.ok()) return s;
  absl::StatusOr<Buffers> buffers =
      CheckAll("Gemm", {{"a", &a, Product(m, k)},
                        {"b", &b, Product(k, n)},
                        {"c", &c, Product(m, n)}});
  if (!buffers.ok()) return buffers.status();
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    // BLAS rejects a zero leading dimension: C = beta * C by hand.
    return Enqueue(*buffers, "cuda::LaunchScale", [&] {
      return cuda::LaunchScale(Product(m, n), beta, c.data(), compute_.get());
    });
  }
  if (absl::Status s = BeforeCompute(*buffers); !s.ok()) return s;
  // cuBLAS is column-major, where row-major C (m x n) is C^T (n x m):
  // C^T = op(B)^T * op(A)^T, so B goes first and the shapes swap.
  PS_CUBLAS_RETURN_IF_ERROR(cublasSgemm(
      cublas_.get(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b.data(),
      trans_b ? k : n, a.data(), trans_a ? m : k, &beta, c.data(), n));
  return AfterCompute(*buffers);
}

absl::Status CudaBackend::AddBias(int rows, int cols, const DeviceBuffer& bias,
                                  DeviceBuffer& y) {
  if (absl::Status s = CheckMatrix("AddBias", rows, cols); !s.ok()) return s;
  absl::StatusOr<Buffers> buffers = CheckAll(
      "AddBias",
      {{"bias", &bias, Product(1, cols)}, {"y", &y, Product(rows, cols)}});
  if (!buffers.ok()) return buffers.status();
  return Enqueue(*buffers, "cuda::LaunchAddBias", [&] {
    return cuda::LaunchAddBias(rows, cols, bias.data(), y.data(),
                               compute_.get());
  });
}

absl::Status CudaBackend::Relu(size_t n, const DeviceBuffer& x,
                               DeviceBuffer& y) {
  absl::StatusOr<Buffers> buffers =
      CheckAll("Relu", {{"x", &x, n}, {"y", &y, n}});
  if (!buffers.ok()) return buffers.status();
  return Enqueue(*buffers, "cuda::LaunchRelu", [&] {
    return cuda::LaunchRelu(n, x.data(), y.data(), compute_.get());
  });
}

absl::Status CudaBackend::ReluGrad(size_t n, const DeviceBuffer& activation,
                                   const DeviceBuffer& grad_y,
                                   DeviceBuffer& grad_x) {
  absl::StatusOr<Buffers> buffers =
      CheckAll("ReluGrad", {{"activation", &activation, n},
                            {"grad_y", &grad_y, n},
                            {"grad_x", &grad_x, n}});
  if (!buffers.ok()) return buffers.status();
  return Enqueue(*buffers, "cuda::LaunchReluGrad", [&] {
    return cuda::LaunchReluGrad(n, activation.data(), grad_y.data(),
                                grad_x.data(), compute_.get());
  });
}

absl::Status CudaBackend::SoftmaxCrossEntropy(int rows, int cols,
                                              const DeviceBuffer& logits,
                                              const DeviceBuffer& labels,
                                              DeviceBuffer& loss,
                                              DeviceBuffer& grad_logits) {
  constexpr absl::string_view kOp = "SoftmaxCrossEntropy";
  if (absl::Status s = CheckClassMatrix(kOp, rows, cols); !s.ok()) return s;
  absl::StatusOr<Buffers> buffers =
      CheckAll(kOp, {{"logits", &logits, Product(rows, cols)},
                     {"labels", &labels, Product(rows, 1)},
                     {"loss", &loss, 1},
                     {"grad_logits", &grad_logits, Product(rows, cols)}});
  if (!buffers.ok()) return buffers.status();
  PS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if (static_cast<size_t>(rows) > row_loss_capacity_) {
    // Grows to the batch size once; cudaFree waits for its users.
    row_loss_capacity_ = 0;
    if (absl::Status s = cuda::AllocateDevice(rows, row_loss_); !s.ok()) {
      return s;
    }
    row_loss_capacity_ = rows;
  }
  auto launch = [&] {
    return cuda::LaunchSoftmaxCrossEntropy(
        rows, cols, logits.data(), labels.data(), row_loss_.get(), loss.data(),
        grad_logits.data(), bad_row_.get(), compute_.get());
  };
  if (absl::Status s =
          Enqueue(*buffers, "cuda::LaunchSoftmaxCrossEntropy", launch);
      !s.ok()) {
    return s;
  }
  // Fetch the label verdict for a later call to report (see CheckLabels).
  PS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(bad_row_host_.get(), bad_row_.get(),
                                          sizeof(int), cudaMemcpyDeviceToHost,
                                          compute_.get()));
  PS_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(label_check_done_.get(), compute_.get()));
  label_check_pending_ = true;
  label_check_cols_ = cols;
  return absl::OkStatus();
}

absl::Status CudaBackend::ColumnSum(int rows, int cols, const DeviceBuffer& x,
                                    DeviceBuffer& out) {
  if (absl::Status s = CheckMatrix("ColumnSum", rows, cols); !s.ok()) {
    return s;
  }
  absl::StatusOr<Buffers> buffers = CheckAll(
      "ColumnSum",
      {{"x", &x, Product(rows, cols)}, {"out", &out, Product(1, cols)}});
  if (!buffers.ok()) return buffers.status();
  return Enqueue(*buffers, "cuda::LaunchColumnSum", [&] {
    return cuda::LaunchColumnSum(rows, cols, x.data(), out.data(),
                                 compute_.get());
  });
}

absl::Status CudaBackend::ArgmaxRows(int rows, int cols, const DeviceBuffer& x,
                                     DeviceBuffer& out) {
  if (absl::Status s = CheckArgmaxShape(rows, cols); !s.ok()) return s;
  absl::StatusOr<Buffers> buffers = CheckAll(
      "ArgmaxRows",
      {{"x", &x, Product(rows, cols)}, {"out", &out, Product(rows, 1)}});
  if (!buffers.ok()) return buffers.status();
  return Enqueue(*buffers, "cuda::LaunchArgmaxRows", [&] {
    return cuda::LaunchArgmaxRows(rows, cols, x.data(), out.data(),
                                  compute_.get());
  });
}

absl::Status CudaBackend::CheckLabels(bool wait) {
  if (!label_check_pending_) return absl::OkStatus();
  if (wait) {
    PS_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(label_check_done_.get()));
  } else {
    const cudaError_t state = cudaEventQuery(label_check_done_.get());
    if (state == cudaErrorNotReady) {
      // "Not ready" is no failure: keep it from reaching a launch check.
      if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
      return absl::OkStatus();
    }
    if (state != cudaSuccess) return cuda::CudaError(state, "cudaEventQuery");
  }
  label_check_pending_ = false;
  const int bad_row = bad_row_host_[0];
  if (bad_row == 0) return absl::OkStatus();
  bad_row_host_[0] = 0;
  PS_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(bad_row_.get(), 0, sizeof(int), compute_.get()));
  return absl::InvalidArgumentError(absl::StrFormat(
      "SoftmaxCrossEntropy: the label of row %d is not a class index in "
      "[0, %d); its loss and gradient are NaN",
      bad_row - 1, label_check_cols_));
}

}  // namespace ps::kernels::cuda
