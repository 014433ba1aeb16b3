#ifndef PS_KERNELS_CUDA_CONV_H_
#define PS_KERNELS_CUDA_CONV_H_

// Internal to the CUDA backend: convolutions as im2col + cuBLAS. Include only
// from CUDA-enabled sources.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/backend.h"
#include "kernels/cuda_util.h"

namespace ps::kernels::cuda {

// Runs the three convolution passes on one stream, a chunk of images at a
// time: the chunk's im2col matrix [in_channels * kernel area, images * out
// area] and its gradient or output in [channels, images, area] order (one
// swap of leading axes from NCHW) make each pass a single cuBLAS GEMM whose
// inner or outer dimension spans the chunk, rather than one small GEMM per
// image. Chunks hold as many images as fit kScratchFloats (at least one).
//
// Owns its scratch device memory, grown to the largest chunk seen (cudaFree
// of the old block waits for the device). Shapes were checked by the caller
// (CheckConv2dShape) and pointers are device memory of the right sizes; the
// work is only enqueued. Not thread-safe; used by one backend.
class ConvRunner {
 public:
  static constexpr size_t kScratchFloats = size_t{1} << 24;  // 64 MiB.

  // Neither handle is owned; both must outlive this runner. `cublas` is
  // bound to `stream`.
  void Bind(cublasHandle_t cublas, cudaStream_t stream) {
    cublas_ = cublas;
    stream_ = stream;
  }

  absl::Status Forward(const Conv2dShape& shape, const float* x,
                       const float* weights, float* y);
  absl::Status BackwardData(const Conv2dShape& shape, const float* grad_y,
                            const float* weights, float* grad_x);
  absl::Status BackwardFilter(const Conv2dShape& shape, const float* x,
                              const float* grad_y, float* grad_weights);

 private:
  struct Plan;

  // The chunking of `shape`, with scratch reserved for it.
  absl::Status Prepare(const Conv2dShape& shape, Plan& plan);
  // Row-major C[m x n] = op(A) * op(B) + beta * C, as Backend::Gemm.
  absl::Status Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                    const float* a, const float* b, float beta, float* c);

  cublasHandle_t cublas_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceArray<float> scratch_;
  size_t capacity_ = 0;
};

}  // namespace ps::kernels::cuda

#endif  // PS_KERNELS_CUDA_CONV_H_
