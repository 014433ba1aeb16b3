#ifndef PS_KERNELS_BACKEND_H_
#define PS_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps::kernels {

// A float32 buffer owned by a backend: host memory for the CPU backend,
// device memory for the CUDA backend. Move-only; freed by its destructor.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual float* data() = 0;
  virtual const float* data() const = 0;
  virtual size_t size() const = 0;  // In elements.
};

// The numerical operations training needs, on row-major float32 matrices in
// buffers from the same backend. Shapes are checked by the caller (the model),
// which owns the layout; a backend reports failures of its own (allocation,
// device errors) as a Status naming the call that failed.
//
// A backend is used by one thread at a time; operations may run
// asynchronously on a device, and `Synchronize` waits for them.
class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda:<ordinal>".
  virtual std::string name() const = 0;

  virtual absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(
      size_t num_elements) = 0;

  // Host <-> backend copies of `num_elements` floats. Both return once `host`
  // may be reused: CopyToHost first waits for the operations issued earlier
  // that write `src`, so the values it returns are final without Synchronize.
  virtual absl::Status CopyToDevice(const float* host, size_t num_elements,
                                    DeviceBuffer& dst, size_t dst_offset) = 0;
  virtual absl::Status CopyToHost(const DeviceBuffer& src, size_t src_offset,
                                  size_t num_elements, float* host) = 0;

  // C[m x n] = alpha * op(A) * op(B) + beta * C, where op(A) is m x k and
  // op(B) is k x n; A is stored k x m when trans_a, B is n x k when trans_b.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                            float alpha, const DeviceBuffer& a,
                            const DeviceBuffer& b, float beta,
                            DeviceBuffer& c) = 0;

  // y[r, c] += bias[c] for a rows x cols matrix y.
  virtual absl::Status AddBias(int rows, int cols, const DeviceBuffer& bias,
                               DeviceBuffer& y) = 0;

  // y = max(x, 0), elementwise over n elements (x and y may alias).
  virtual absl::Status Relu(size_t n, const DeviceBuffer& x,
                            DeviceBuffer& y) = 0;

  // grad_x = grad_y where activation > 0, else 0 (grad_x may alias grad_y).
  virtual absl::Status ReluGrad(size_t n, const DeviceBuffer& activation,
                                const DeviceBuffer& grad_y,
                                DeviceBuffer& grad_x) = 0;

  // Softmax cross-entropy over a rows x cols matrix of logits with one
  // integer label per row (labels hold the class index as a float).
  // Writes the mean loss over rows into loss[0], and d(mean loss)/d(logits)
  // into grad_logits.
  virtual absl::Status SoftmaxCrossEntropy(int rows, int cols,
                                           const DeviceBuffer& logits,
                                           const DeviceBuffer& labels,
                                           DeviceBuffer& loss,
                                           DeviceBuffer& grad_logits) = 0;

  // out[c] = sum over r of x[r, c] for a rows x cols matrix (bias gradient).
  virtual absl::Status ColumnSum(int rows, int cols, const DeviceBuffer& x,
                                 DeviceBuffer& out) = 0;

  // out[r] = index of the largest x[r, c] (as a float), for evaluation.
  virtual absl::Status ArgmaxRows(int rows, int cols, const DeviceBuffer& x,
                                  DeviceBuffer& out) = 0;

  // Waits for every operation issued so far.
  virtual absl::Status Synchronize() = 0;
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_BACKEND_H_
