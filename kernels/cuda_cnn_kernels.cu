// Our CUDA kernels for convolutional networks: im2col / col2im around the
// cuBLAS GEMMs, pooling, channel bias and dropout. One thread per output
// element, grid-stride loops; gradients are gathered (each thread sums what
// reaches its element, in a fixed order) rather than scattered with atomics,
// so results repeat bit for bit.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda_cnn_kernels.h"
#include "kernels/dropout_mask.h"

namespace ps::kernels::cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU; grid-stride loops do the rest.
constexpr size_t kMaxBlocks = 4096;

unsigned BlocksFor(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

#define PS_GRID_STRIDE_LOOP(i, n)                                         \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (n); \
       i += size_t{gridDim.x} * blockDim.x)

// The windows, out of `count` along one axis, that hold position `at`: the
// window of output o covers [o * stride, o * stride + window), so these are
// o in [*first, *last] (none when *first > *last).
__device__ void WindowsHolding(int at, int window, int stride, int count,
                               int* first, int* last) {
  const int lowest = at - window + 1;
  *first = lowest <= 0 ? 0 : (lowest + stride - 1) / stride;
  *last = min(at / stride, count - 1);
}

__global__ void Im2colKernel(ConvGeometry g, int images, const float* x,
                             float* columns) {
  const int area = g.out_height * g.out_width;
  const size_t row_length = size_t{1} * images * area;
  const size_t n =
      row_length * g.in_channels * g.kernel_height * g.kernel_width;
  PS_GRID_STRIDE_LOOP(i, n) {
    const size_t row = i / row_length;
    const size_t column = i % row_length;
    const int image = static_cast<int>(column / area);
    const int p = static_cast<int>(column % area);
    const int tap = static_cast<int>(row % (g.kernel_height * g.kernel_width));
    const int c = static_cast<int>(row / (g.kernel_height * g.kernel_width));
    const int h = (p / g.out_width) * g.stride_height + tap / g.kernel_width -
                  g.pad_height;
    const int w =
        (p % g.out_width) * g.stride_width + tap % g.kernel_width - g.pad_width;
    float value = 0.0f;
    if (h >= 0 && h < g.in_height && w >= 0 && w < g.in_width) {
      value = x[((size_t{1} * image * g.in_channels + c) * g.in_height + h) *
                    g.in_width +
                w];
    }
    columns[i] = value;
  }
}

__global__ void Col2imKernel(ConvGeometry g, int images, const float* columns,
                             float* grad_x) {
  const int area = g.out_height * g.out_width;
  const size_t row_length = size_t{1} * images * area;
  const size_t n =
      size_t{1} * images * g.in_channels * g.in_height * g.in_width;
  PS_GRID_STRIDE_LOOP(i, n) {
    const int w = static_cast<int>(i % g.in_width);
    const int h = static_cast<int>(i / g.in_width % g.in_height);
    const int c =
        static_cast<int>(i / g.in_width / g.in_height % g.in_channels);
    const int image =
        static_cast<int>(i / g.in_width / g.in_height / g.in_channels);
    // Output (oh, ow) reads (h, w) at tap (u, v) when
    // oh * stride + u - pad == h, and likewise for w.
    float sum = 0.0f;
    for (int u = 0; u < g.kernel_height; ++u) {
      const int ph = h + g.pad_height - u;
      if (ph < 0) break;  // Larger u only lowers it.
      if (ph % g.stride_height != 0) continue;
      const int oh = ph / g.stride_height;
      if (oh >= g.out_height) continue;
      for (int v = 0; v < g.kernel_width; ++v) {
        const int pw = w + g.pad_width - v;
        if (pw < 0) break;
        if (pw % g.stride_width != 0) continue;
        const int ow = pw / g.stride_width;
        if (ow >= g.out_width) continue;
        const size_t row =
            (size_t{1} * c * g.kernel_height + u) * g.kernel_width + v;
        sum += columns[row * row_length + size_t{1} * image * area +
                       oh * g.out_width + ow];
      }
    }
    grad_x[i] = sum;
  }
}

__global__ void SwapLeadingAxesKernel(int a, int b, size_t inner,
                                      const float* in, float* out) {
  const size_t n = size_t{1} * a * b * inner;
  PS_GRID_STRIDE_LOOP(i, n) {
    const size_t k = i % inner;
    const size_t j = i / inner % b;
    const size_t l = i / inner / b;
    out[(j * a + l) * inner + k] = in[i];
  }
}

__global__ void AddChannelBiasKernel(size_t n, int channels, int spatial,
                                     const float* bias, float* y) {
  PS_GRID_STRIDE_LOOP(i, n) { y[i] += bias[i / spatial % channels]; }
}

// One block per channel: each thread sums a strided share, then a tree.
__global__ void ChannelBiasGradKernel(int batch, int channels, int spatial,
                                      const float* grad_y, float* grad_bias) {
  __shared__ float partial[kThreads];
  const int c = blockIdx.x;
  const size_t n = size_t{1} * batch * spatial;
  float sum = 0.0f;
  for (size_t i = threadIdx.x; i < n; i += kThreads) {
    const size_t image = i / spatial;
    sum += grad_y[(image * channels + c) * spatial + i % spatial];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      partial[threadIdx.x] += partial[threadIdx.x + width];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) grad_bias[c] = partial[0];
}

__global__ void MaxPoolForwardKernel(PoolGeometry g, size_t planes,
                                     const float* x, float* y, float* argmax) {
  const int area = g.out_height * g.out_width;
  const size_t plane_size = size_t{1} * g.in_height * g.in_width;
  PS_GRID_STRIDE_LOOP(i, planes * area) {
    const float* in = x + i / area * plane_size;
    const int oh = static_cast<int>(i % area) / g.out_width;
    const int ow = static_cast<int>(i % area) % g.out_width;
    int best_at = oh * g.stride_height * g.in_width + ow * g.stride_width;
    float best = in[best_at];
    for (int u = 0; u < g.window_height; ++u) {
      const int row = (oh * g.stride_height + u) * g.in_width;
      for (int v = 0; v < g.window_width; ++v) {
        const int at = row + ow * g.stride_width + v;
        const float value = in[at];
        if (!isnan(best) && (isnan(value) || value > best)) {
          best = value;
          best_at = at;
        }
      }
    }
    y[i] = best;
    argmax[i] = static_cast<float>(best_at);
  }
}

__global__ void MaxPoolBackwardKernel(PoolGeometry g, size_t planes,
                                      const float* grad_y, const float* argmax,
                                      float* grad_x) {
  const int area = g.out_height * g.out_width;
  const int plane_size = g.in_height * g.in_width;
  PS_GRID_STRIDE_LOOP(i, planes * plane_size) {
    const size_t plane = i / plane_size;
    const int at = static_cast<int>(i % plane_size);
    const int h = at / g.in_width, w = at % g.in_width;
    int oh_first, oh_last, ow_first, ow_last;
    WindowsHolding(h, g.window_height, g.stride_height, g.out_height, &oh_first,
                   &oh_last);
    WindowsHolding(w, g.window_width, g.stride_width, g.out_width, &ow_first,
                   &ow_last);
    const float position = static_cast<float>(at);
    float sum = 0.0f;
    for (int oh = oh_first; oh <= oh_last; ++oh) {
      for (int ow = ow_first; ow <= ow_last; ++ow) {
        const size_t out = plane * area + oh * g.out_width + ow;
        if (argmax[out] == position) sum += grad_y[out];
      }
    }
    grad_x[i] = sum;
  }
}

__global__ void AvgPoolForwardKernel(PoolGeometry g, size_t planes,
                                     const float* x, float* y) {
  const int area = g.out_height * g.out_width;
  const size_t plane_size = size_t{1} * g.in_height * g.in_width;
  const float window = static_cast<float>(g.window_height * g.window_width);
  PS_GRID_STRIDE_LOOP(i, planes * area) {
    const float* in = x + i / area * plane_size;
    const int oh = static_cast<int>(i % area) / g.out_width;
    const int ow = static_cast<int>(i % area) % g.out_width;
    float sum = 0.0f;
    for (int u = 0; u < g.window_height; ++u) {
      const float* row =
          in + (oh * g.stride_height + u) * g.in_width + ow * g.stride_width;
      for (int v = 0; v < g.window_width; ++v) sum += row[v];
    }
    y[i] = sum / window;
  }
}

__global__ void AvgPoolBackwardKernel(PoolGeometry g, size_t planes,
                                      const float* grad_y, float* grad_x) {
  const int area = g.out_height * g.out_width;
  const int plane_size = g.in_height * g.in_width;
  const float window = static_cast<float>(g.window_height * g.window_width);
  PS_GRID_STRIDE_LOOP(i, planes * plane_size) {
    const size_t plane = i / plane_size;
    const int at = static_cast<int>(i % plane_size);
    int oh_first, oh_last, ow_first, ow_last;
    WindowsHolding(at / g.in_width, g.window_height, g.stride_height,
                   g.out_height, &oh_first, &oh_last);
    WindowsHolding(at % g.in_width, g.window_width, g.stride_width, g.out_width,
                   &ow_first, &ow_last);
    float sum = 0.0f;
    for (int oh = oh_first; oh <= oh_last; ++oh) {
      for (int ow = ow_first; ow <= ow_last; ++ow) {
        sum += grad_y[plane * area + oh * g.out_width + ow] / window;
      }
    }
    grad_x[i] = sum;
  }
}

__global__ void DropoutKernel(size_t n, uint64_t key, uint64_t first_index,
                              uint32_t threshold, float scale, const float* x,
                              float* y) {
  PS_GRID_STRIDE_LOOP(i, n) {
    y[i] =
        x[i] * (dropout::Kept(key, first_index + i, threshold) ? scale : 0.0f);
  }
}

#undef PS_GRID_STRIDE_LOOP

}  // namespace

cudaError_t LaunchIm2col(const ConvGeometry& geometry, int images,
                         const float* x, float* columns, cudaStream_t stream) {
  const size_t n = size_t{1} * images * geometry.out_height *
                   geometry.out_width * geometry.in_channels *
                   geometry.kernel_height * geometry.kernel_width;
  if (n == 0) return cudaSuccess;
  Im2colKernel<<<BlocksFor(n), kThreads, 0, stream>>>(geometry, images, x,
                                                      columns);
  return cudaGetLastError();
}

cudaError_t LaunchCol2im(const ConvGeometry& geometry, int images,
                         const float* columns, float* grad_x,
                         cudaStream_t stream) {
  const size_t n = size_t{1} * images * geometry.in_channels *
                   geometry.in_height * geometry.in_width;
  if (n == 0) return cudaSuccess;
  Col2imKernel<<<BlocksFor(n), kThreads, 0, stream>>>(geometry, images, columns,
                                                      grad_x);
  return cudaGetLastError();
}

cudaError_t LaunchSwapLeadingAxes(int a, int b, size_t inner, const float* in,
                                  float* out, cudaStream_t stream) {
  const size_t n = size_t{1} * a * b * inner;
  if (n == 0) return cudaSuccess;
  SwapLeadingAxesKernel<<<BlocksFor(n), kThreads, 0, stream>>>(a, b, inner, in,
                                                               out);
  return cudaGetLastError();
}

cudaError_t LaunchAddChannelBias(int batch, int channels, int spatial,
                                 const float* bias, float* y,
                                 cudaStream_t stream) {
  const size_t n = size_t{1} * batch * channels * spatial;
  if (n == 0) return cudaSuccess;
  AddChannelBiasKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, channels,
                                                              spatial, bias, y);
  return cudaGetLastError();
}

cudaError_t LaunchChannelBiasGrad(int batch, int channels, int spatial,
                                  const float* grad_y, float* grad_bias,
                                  cudaStream_t stream) {
  if (channels <= 0) return cudaSuccess;
  ChannelBiasGradKernel<<<static_cast<unsigned>(channels), kThreads, 0,
                          stream>>>(batch, channels, spatial, grad_y,
                                    grad_bias);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPoolForward(const PoolGeometry& geometry, size_t planes,
                                 const float* x, float* y, float* argmax,
                                 cudaStream_t stream) {
  const size_t n = planes * geometry.out_height * geometry.out_width;
  if (n == 0) return cudaSuccess;
  MaxPoolForwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(geometry, planes,
                                                              x, y, argmax);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPoolBackward(const PoolGeometry& geometry, size_t planes,
                                  const float* grad_y, const float* argmax,
                                  float* grad_x, cudaStream_t stream) {
  const size_t n = planes * geometry.in_height * geometry.in_width;
  if (n == 0) return cudaSuccess;
  MaxPoolBackwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(
      geometry, planes, grad_y, argmax, grad_x);
  return cudaGetLastError();
}

cudaError_t LaunchAvgPoolForward(const PoolGeometry& geometry, size_t planes,
                                 const float* x, float* y,
                                 cudaStream_t stream) {
  const size_t n = planes * geometry.out_height * geometry.out_width;
  if (n == 0) return cudaSuccess;
  AvgPoolForwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(geometry, planes,
                                                              x, y);
  return cudaGetLastError();
}

cudaError_t LaunchAvgPoolBackward(const PoolGeometry& geometry, size_t planes,
                                  const float* grad_y, float* grad_x,
                                  cudaStream_t stream) {
  const size_t n = planes * geometry.in_height * geometry.in_width;
  if (n == 0) return cudaSuccess;
  AvgPoolBackwardKernel<<<BlocksFor(n), kThreads, 0, stream>>>(geometry, planes,
                                                               grad_y, grad_x);
  return cudaGetLastError();
}

cudaError_t LaunchDropout(size_t n, uint64_t key, uint64_t first_index,
                          uint32_t threshold, float scale, const float* x,
                          float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DropoutKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, key, first_index,
                                                       threshold, scale, x, y);
  return cudaGetLastError();
}

}  // namespace ps::kernels::cuda
