#ifndef PS_KERNELS_CUDA_CNN_KERNELS_H_
#define PS_KERNELS_CUDA_CNN_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

// Host-side launchers of the convolutional-network kernels
// (kernels/cuda_cnn_kernels.cu), with the conventions of
// kernels/cuda_kernels.h: device pointers, work only enqueued on `stream`,
// the launch error returned, nothing launched for no elements, shapes
// checked by the caller. Images are NCHW; `planes` counts the (image,
// channel) planes of a batch. Every sum runs in a fixed order, so results
// repeat bit for bit; none uses atomics.
namespace ps::kernels::cuda {

// A convolution's geometry, as in Conv2dShape (kernels/backend.h), which is
// not included here so that nvcc never compiles Abseil.
struct ConvGeometry {
  int in_channels, in_height, in_width;
  int kernel_height, kernel_width;
  int stride_height, stride_width;
  int pad_height, pad_width;
  int out_height, out_width;
};

// columns [in_channels * kernel area, images * out area] of `images` images
// from x: element (row, g * out_area + p) holds what output position p of
// image g reads at kernel tap `row`, 0 where that is padding.
cudaError_t LaunchIm2col(const ConvGeometry& geometry, int images,
                         const float* x, float* columns, cudaStream_t stream);

// grad_x of `images` images = `columns` (laid out as above) folded back:
// each input element is the sum, in a fixed order, of the elements that read
// it, 0 if none (overwrites).
cudaError_t LaunchCol2im(const ConvGeometry& geometry, int images,
                         const float* columns, float* grad_x,
                         cudaStream_t stream);

// out [b, a, inner] = in [a, b, inner]: between a batch [images, channels,
// area] and the [channels, images, area] layout of one GEMM per batch.
cudaError_t LaunchSwapLeadingAxes(int a, int b, size_t inner, const float* in,
                                  float* out, cudaStream_t stream);

// y[n, c, p] += bias[c].
cudaError_t LaunchAddChannelBias(int batch, int channels, int spatial,
                                 const float* bias, float* y,
                                 cudaStream_t stream);

// grad_bias[c] = sum over n, p of grad_y[n, c, p] in a fixed order (0 for an
// empty batch).
cudaError_t LaunchChannelBiasGrad(int batch, int channels, int spatial,
                                  const float* grad_y, float* grad_bias,
                                  cudaStream_t stream);

// Pooling geometry, as in Pool2dShape.
struct PoolGeometry {
  int in_height, in_width;
  int window_height, window_width;
  int stride_height, stride_width;
  int out_height, out_width;
};

// y = window maxima, argmax = their positions in the plane (as floats); the
// first maximum, or first NaN, wins.
cudaError_t LaunchMaxPoolForward(const PoolGeometry& geometry, size_t planes,
                                 const float* x, float* y, float* argmax,
                                 cudaStream_t stream);

// grad_x[e] = sum, over the windows holding e whose argmax is e, of grad_y
// (overwrites). An argmax naming no element of its window is never matched,
// so its gradient is dropped.
cudaError_t LaunchMaxPoolBackward(const PoolGeometry& geometry, size_t planes,
                                  const float* grad_y, const float* argmax,
                                  float* grad_x, cudaStream_t stream);

cudaError_t LaunchAvgPoolForward(const PoolGeometry& geometry, size_t planes,
                                 const float* x, float* y, cudaStream_t stream);

// grad_x[e] = sum over the windows holding e of grad_y / window area
// (overwrites).
cudaError_t LaunchAvgPoolBackward(const PoolGeometry& geometry, size_t planes,
                                  const float* grad_y, float* grad_x,
                                  cudaStream_t stream);

// y[i] = x[i] * (kept ? scale : 0), kept as in kernels/dropout_mask.h for
// element first_index + i under `key` (StepKey) and `threshold`; x and y may
// alias.
cudaError_t LaunchDropout(size_t n, uint64_t key, uint64_t first_index,
                          uint32_t threshold, float scale, const float* x,
                          float* y, cudaStream_t stream);

}  // namespace ps::kernels::cuda

#endif  // PS_KERNELS_CUDA_CNN_KERNELS_H_
