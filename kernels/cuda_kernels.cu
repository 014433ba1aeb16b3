// Our CUDA kernels: everything training needs besides GEMM (cuBLAS). Kept to
// the minimum, since nvcc compiles this file for three targets.

#include <climits>
#include <cmath>
#include <cstddef>

#include "kernels/cuda_kernels.h"

namespace ps::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;  // One warp per row.
constexpr unsigned kFullMask = 0xffffffffu;
// Enough blocks to fill any current GPU; grid-stride loops do the rest.
constexpr size_t kMaxBlocks = 4096;

unsigned BlocksFor(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

__device__ float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

__global__ void ScaleKernel(size_t n, float beta, float* y) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    y[i] = beta == 0.0f ? 0.0f : beta * y[i];
  }
}

__global__ void AddBiasKernel(size_t n, int cols, const float* bias, float* y) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    y[i] += bias[i % cols];
  }
}

__global__ void ReluKernel(size_t n, const float* x, float* y) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float v = x[i];
    y[i] = v < 0.0f ? 0.0f : v;
  }
}

__global__ void ReluGradKernel(size_t n, const float* activation,
                               const float* grad_y, float* grad_x) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    grad_x[i] = activation[i] > 0.0f ? grad_y[i] : 0.0f;
  }
}

// One warp per row. Rows exit whole warps at a time, so the full-mask
// shuffles always see 32 live lanes.
__global__ void SoftmaxRowsKernel(int rows, int cols, const float* logits,
                                  const float* labels, float* row_loss,
                                  float* grad_logits, int* bad_row) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* x = logits + static_cast<size_t>(row) * cols;
  float* g = grad_logits + static_cast<size_t>(row) * cols;

  const float label = labels[row];
  if (!(label >= 0.0f && label < static_cast<float>(cols) &&
        label == floorf(label))) {
    for (int c = lane; c < cols; c += kWarp) g[c] = NAN;
    if (lane == 0) {
      row_loss[row] = NAN;
      *bad_row = row + 1;  // Racing stores all write some bad row.
    }
    return;
  }
  const int target = static_cast<int>(label);

  float max = -INFINITY;
  for (int c = lane; c < cols; c += kWarp) max = fmaxf(max, x[c]);
  max = WarpMax(max);
  // exp(x - max) summed apart for the target and the other classes: when
  // the target dominates, p - 1 = -others / sum keeps the digits that
  // computing p first and subtracting 1 would cancel.
  float target_exp = 0.0f;
  float others = 0.0f;
  for (int c = lane; c < cols; c += kWarp) {
    const float e = expf(x[c] - max);
    if (c == target) {
      target_exp = e;
    } else {
      others += e;
    }
  }
  target_exp = WarpSum(target_exp);
  others = WarpSum(others);
  const float sum = target_exp + others;
  const float scale = 1.0f / (sum * static_cast<float>(rows));
  for (int c = lane; c < cols; c += kWarp) {
    g[c] = (c == target ? -others : expf(x[c] - max)) * scale;
  }
  if (lane == 0) row_loss[row] = logf(sum) + (max - x[target]);
}

// A single block sums the row losses in double, in a fixed order.
__global__ void MeanKernel(int n, const float* values, float* mean) {
  __shared__ double partial[kThreads];
  double sum = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) sum += values[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width)
      partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) mean[0] = static_cast<float>(partial[0] / n);
}

// Block (32, kColumnSumRows): 32 adjacent columns (coalesced reads), each
// summed by kColumnSumRows threads over interleaved rows, then combined.
constexpr int kColumnSumRows = 16;

__global__ void ColumnSumKernel(int rows, int cols, const float* x,
                                float* out) {
  __shared__ float partial[kColumnSumRows][kWarp + 1];
  const int c = blockIdx.x * kWarp + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kColumnSumRows) {
      sum += x[static_cast<size_t>(r) * cols + c];
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int i = 1; i < kColumnSumRows; ++i) sum += partial[i][threadIdx.x];
    out[c] = sum;
  }
}

// One warp per row; each lane keeps the first maximum of its columns, then
// the warp keeps the lowest index among equal maxima. A lane without
// columns never wins, so the result is always a valid column.
__global__ void ArgmaxRowsKernel(int rows, int cols, const float* x,
                                 float* out) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const float* v = x + static_cast<size_t>(row) * cols;
  float best = -INFINITY;
  int best_index = INT_MAX;
  for (int c = lane; c < cols; c += kWarp) {
    if (best_index == INT_MAX || v[c] > best) {
      best = v[c];
      best_index = c;
    }
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullMask, best, offset);
    const int other_index = __shfl_xor_sync(kFullMask, best_index, offset);
    if (other_index != INT_MAX &&
        (best_index == INT_MAX || other > best ||
         (other == best && other_index < best_index))) {
      best = other;
      best_index = other_index;
    }
  }
  if (lane == 0) out[row] = static_cast<float>(best_index);
}

unsigned WarpRowBlocks(int rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

cudaError_t LaunchScale(size_t n, float beta, float* y, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, beta, y);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(int rows, int cols, const float* bias, float* y,
                          cudaStream_t stream) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return cudaSuccess;
  AddBiasKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, cols, bias, y);
  return cudaGetLastError();
}

cudaError_t LaunchRelu(size_t n, const float* x, float* y,
                       cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchReluGrad(size_t n, const float* activation,
                           const float* grad_y, float* grad_x,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluGradKernel<<<BlocksFor(n), kThreads, 0, stream>>>(n, activation, grad_y,
                                                        grad_x);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                      const float* labels, float* row_loss,
                                      float* loss, float* grad_logits,
                                      int* bad_row, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  SoftmaxRowsKernel<<<WarpRowBlocks(rows), kThreads, 0, stream>>>(
      rows, cols, logits, labels, row_loss, grad_logits, bad_row);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  MeanKernel<<<1, kThreads, 0, stream>>>(rows, row_loss, loss);
  return cudaGetLastError();
}

cudaError_t LaunchColumnSum(int rows, int cols, const float* x, float* out,
                            cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((cols + kWarp - 1) / kWarp);
  ColumnSumKernel<<<blocks, dim3(kWarp, kColumnSumRows), 0, stream>>>(
      rows, cols, x, out);
  return cudaGetLastError();
}

cudaError_t LaunchArgmaxRows(int rows, int cols, const float* x, float* out,
                             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  ArgmaxRowsKernel<<<WarpRowBlocks(rows), kThreads, 0, stream>>>(rows, cols, x,
                                                                 out);
  return cudaGetLastError();
}

}  // namespace ps::kernels::cuda
