#ifndef PS_KERNELS_BACKEND_H_
#define PS_KERNELS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ps::kernels {

// A 2-D convolution over a batch of images, all NCHW float32 and batch-major:
//   x        [batch, in_channels, in_height, in_width]
//   weights  [out_channels, in_channels, kernel_height, kernel_width]
//   y        [batch, out_channels, out_height(), out_width()]
// y[n, o, i, j] = sum over c, u, v of weights[o, c, u, v] *
//   x[n, c, i * stride_height + u - pad_height, j * stride_width + v -
//   pad_width], where x is zero outside the image (cross-correlation, as in
// PyTorch's Conv2d). A bias is separate: AddChannelBias. Extents are checked
// by every backend (kernels/shape_checks.h): batch may be 0, every other
// extent and stride is at least 1, padding at least 0, and the kernel fits
// the padded image.
struct Conv2dShape {
  int batch = 0;
  int in_channels = 0;
  int in_height = 0;
  int in_width = 0;
  int out_channels = 0;
  int kernel_height = 0;
  int kernel_width = 0;
  int stride_height = 1;
  int stride_width = 1;
  int pad_height = 0;
  int pad_width = 0;

  int out_height() const {
    return (in_height + 2 * pad_height - kernel_height) / stride_height + 1;
  }
  int out_width() const {
    return (in_width + 2 * pad_width - kernel_width) / stride_width + 1;
  }
  // Element counts of x, weights and y.
  uint64_t input_size() const {
    return uint64_t{1} * batch * in_channels * in_height * in_width;
  }
  uint64_t weight_size() const {
    return uint64_t{1} * out_channels * in_channels * kernel_height *
           kernel_width;
  }
  uint64_t output_size() const {
    return uint64_t{1} * batch * out_channels * out_height() * out_width();
  }
  // Floats of one image's im2col matrix (in_channels x kernel area rows,
  // output area columns); 0 for a 1x1 kernel at stride 1 without padding,
  // whose image is its own matrix.
  uint64_t im2col_size() const {
    if (kernel_height == 1 && kernel_width == 1 && stride_height == 1 &&
        stride_width == 1 && pad_height == 0 && pad_width == 0) {
      return 0;
    }
    return uint64_t{1} * in_channels * kernel_height * kernel_width *
           out_height() * out_width();
  }
};

// Max or average pooling over a batch of NCHW images, without padding:
//   x [batch, channels, in_height, in_width]
//   y [batch, channels, out_height(), out_width()]
// y[n, c, i, j] pools the window of window_height x window_width elements of
// x whose top-left corner is (i * stride_height, j * stride_width). Windows
// lie inside the image; rows and columns no window reaches are ignored (and
// get zero gradient). Checked like Conv2dShape: batch >= 0, every other
// extent >= 1, the window no larger than the image.
struct Pool2dShape {
  int batch = 0;
  int channels = 0;
  int in_height = 0;
  int in_width = 0;
  int window_height = 0;
  int window_width = 0;
  int stride_height = 1;
  int stride_width = 1;

  int out_height() const {
    return (in_height - window_height) / stride_height + 1;
  }
  int out_width() const { return (in_width - window_width) / stride_width + 1; }
  uint64_t input_size() const {
    return uint64_t{1} * batch * channels * in_height * in_width;
  }
  uint64_t output_size() const {
    return uint64_t{1} * batch * channels * out_height() * out_width();
  }
};

// Which elements dropout zeroes: element i of a call is dropped when a hash
// of (seed, step, first_index + i) falls below `rate` (see
// kernels/dropout_mask.h), so the mask depends on nothing else: the same on
// every backend, in forward and backward, and for a batch split between
// workers that pass each part's offset as first_index. Kept elements are
// scaled by 1 / (1 - rate), computed in float.
struct DropoutMask {
  float rate = 0.0f;  // In [0, 1).
  uint64_t seed = 0;
  uint64_t step = 0;  // A new mask each training step.
  uint64_t first_index = 0;
};

// A float32 buffer owned by a backend: host memory for the CPU backend,
// device memory for the CUDA backend. Move-only; freed by its destructor.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual float* data() = 0;
  virtual const float* data() const = 0;
  virtual size_t size() const = 0;  // In elements.
};

// The numerical operations training needs, on row-major float32 matrices and
// NCHW image batches in buffers from the same backend. The caller (the model)
// owns the layout; a backend refuses shapes that make no sense
// (kernels/shape_checks.h) and reports failures of its own (allocation,
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

  // --- Convolutional networks. Outputs are overwritten, never accumulated
  // into, and must not be one of the inputs. A backend may keep scratch
  // memory for these (im2col columns), grown to the largest shape seen and
  // reused; see each backend's header.

  // y = conv(x, weights), shapes as in Conv2dShape.
  virtual absl::Status Conv2dForward(const Conv2dShape& shape,
                                     const DeviceBuffer& x,
                                     const DeviceBuffer& weights,
                                     DeviceBuffer& y) = 0;

  // grad_x [batch, in_channels, in_height, in_width] = d(sum of grad_y * y)
  // / dx, for grad_y shaped like y.
  virtual absl::Status Conv2dBackwardData(const Conv2dShape& shape,
                                          const DeviceBuffer& grad_y,
                                          const DeviceBuffer& weights,
                                          DeviceBuffer& grad_x) = 0;

  // grad_weights (shaped like weights) = d(sum of grad_y * y) / dweights,
  // summed over the batch (zero when the batch is empty).
  virtual absl::Status Conv2dBackwardFilter(const Conv2dShape& shape,
                                            const DeviceBuffer& x,
                                            const DeviceBuffer& grad_y,
                                            DeviceBuffer& grad_weights) = 0;

  // y[n, c, p] += bias[c] for y [batch, channels, spatial] (spatial = H * W).
  virtual absl::Status AddChannelBias(int batch, int channels, int spatial,
                                      const DeviceBuffer& bias,
                                      DeviceBuffer& y) = 0;

  // grad_bias[c] = sum over n and p of grad_y[n, c, p] (zero for an empty
  // batch): the gradient of AddChannelBias's bias.
  virtual absl::Status ChannelBiasGrad(int batch, int channels, int spatial,
                                       const DeviceBuffer& grad_y,
                                       DeviceBuffer& grad_bias) = 0;

  // y = the maximum of each window; argmax (shaped like y) receives the
  // position of that maximum in its input plane, in_width * row + column, as
  // a float (exact: a plane holds at most 2^24 elements). Ties go to the
  // first in row-major order; a NaN in a window wins, so it propagates.
  virtual absl::Status MaxPool2dForward(const Pool2dShape& shape,
                                        const DeviceBuffer& x, DeviceBuffer& y,
                                        DeviceBuffer& argmax) = 0;

  // grad_x = grad_y routed to the positions in `argmax`, which must come from
  // MaxPool2dForward of the same shape; overlapping windows add up.
  virtual absl::Status MaxPool2dBackward(const Pool2dShape& shape,
                                         const DeviceBuffer& grad_y,
                                         const DeviceBuffer& argmax,
                                         DeviceBuffer& grad_x) = 0;

  // y = the mean of each window.
  virtual absl::Status AvgPool2dForward(const Pool2dShape& shape,
                                        const DeviceBuffer& x,
                                        DeviceBuffer& y) = 0;

  // grad_x[e] = sum over the windows holding e of grad_y / window size.
  virtual absl::Status AvgPool2dBackward(const Pool2dShape& shape,
                                         const DeviceBuffer& grad_y,
                                         DeviceBuffer& grad_x) = 0;

  // y[i] = x[i] * (kept(i) ? scale : 0) over n elements (see DropoutMask),
  // a product so that a NaN stays NaN even where dropped; x and y may alias.
  virtual absl::Status DropoutForward(size_t n, const DropoutMask& mask,
                                      const DeviceBuffer& x,
                                      DeviceBuffer& y) = 0;

  // grad_x[i] = grad_y[i] * (kept(i) ? scale : 0): the forward call's mask
  // when given the same `mask` (grad_x may alias grad_y).
  virtual absl::Status DropoutBackward(size_t n, const DropoutMask& mask,
                                       const DeviceBuffer& grad_y,
                                       DeviceBuffer& grad_x) = 0;

  // Waits for every operation issued so far.
  virtual absl::Status Synchronize() = 0;

  // Scratch memory the convolutions keep, for a worker's memory budget:
  // the bytes this backend holds once it has run a convolution of `shape`
  // (kept after, grown to the largest shape run), and the bytes it holds
  // now. 0 for a backend that keeps none or does not say (CUDA's is
  // chunked device memory: not counted).
  virtual int64_t ConvScratchBytes(const Conv2dShape& shape) const { return 0; }
  virtual int64_t conv_scratch_bytes() const { return 0; }
};

}  // namespace ps::kernels

#endif  // PS_KERNELS_BACKEND_H_
