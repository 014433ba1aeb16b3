#include "kernels/cuda_conv.h"

#include <algorithm>
#include <climits>
#include <cstddef>

#include "absl/strings/string_view.h"
#include "kernels/cuda_cnn_kernels.h"

namespace ps::kernels::cuda {
namespace {

absl::Status Launched(cudaError_t error, absl::string_view launcher) {
  if (error == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // Reported here; not again by the next launch.
  return CudaError(error, launcher);
}

ConvGeometry GeometryOf(const Conv2dShape& s) {
  return ConvGeometry{s.in_channels,   s.in_height,    s.in_width,
                      s.kernel_height, s.kernel_width, s.stride_height,
                      s.stride_width,  s.pad_height,   s.pad_width,
                      s.out_height(),  s.out_width()};
}

}  // namespace

struct ConvRunner::Plan {
  ConvGeometry geometry;
  int rows;          // Of the im2col matrix: in_channels * kernel area.
  int area;          // Output positions of one image.
  int images;        // Per chunk.
  size_t image_in;   // Floats of one input image.
  size_t image_out;  // Floats of one output image.
  float* columns;    // rows x (images * area).
  float* staged;     // out_channels x (images * area).
};

absl::Status ConvRunner::Prepare(const Conv2dShape& s, Plan& plan) {
  plan.geometry = GeometryOf(s);
  plan.rows = s.in_channels * s.kernel_height * s.kernel_width;
  plan.area = s.out_height() * s.out_width();
  plan.image_in = size_t{1} * s.in_channels * s.in_height * s.in_width;
  plan.image_out = size_t{1} * s.out_channels * plan.area;
  const size_t per_image = (size_t{1} * plan.rows + s.out_channels) * plan.area;
  size_t images = std::max<size_t>(1, kScratchFloats / per_image);
  images = std::min<size_t>(images, s.batch);
  // images * area is a GEMM dimension: an int.
  images = std::min<size_t>(images, INT_MAX / plan.area);
  plan.images = static_cast<int>(std::max<size_t>(images, 1));
  const size_t needed = per_image * plan.images;
  if (needed > capacity_) {
    capacity_ = 0;
    if (absl::Status s = AllocateDevice(needed, scratch_); !s.ok()) return s;
    capacity_ = needed;
  }
  plan.columns = scratch_.get();
  plan.staged =
      scratch_.get() + size_t{1} * plan.rows * plan.area * plan.images;
  return absl::OkStatus();
}

absl::Status ConvRunner::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                              const float* a, const float* b, float beta,
                              float* c) {
  const float alpha = 1.0f;
  // Column-major cuBLAS sees row-major C as C^T = op(B)^T * op(A)^T.
  PS_CUBLAS_RETURN_IF_ERROR(
      cublasSgemm(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                  trans_b ? k : n, a, trans_a ? m : k, &beta, c, n));
  return absl::OkStatus();
}

absl::Status ConvRunner::Forward(const Conv2dShape& s, const float* x,
                                 const float* weights, float* y) {
  if (s.batch == 0) return absl::OkStatus();
  Plan p;
  if (absl::Status st = Prepare(s, p); !st.ok()) return st;
  for (int first = 0; first < s.batch; first += p.images) {
    const int images = std::min(p.images, s.batch - first);
    if (absl::Status st =
            Launched(LaunchIm2col(p.geometry, images, x + first * p.image_in,
                                  p.columns, stream_),
                     "cuda::LaunchIm2col");
        !st.ok()) {
      return st;
    }
    // staged [out_channels, images * area] = W * columns.
    if (absl::Status st = Gemm(false, false, s.out_channels, images * p.area,
                               p.rows, weights, p.columns, 0.0f, p.staged);
        !st.ok()) {
      return st;
    }
    if (absl::Status st = Launched(
            LaunchSwapLeadingAxes(s.out_channels, images, p.area, p.staged,
                                  y + first * p.image_out, stream_),
            "cuda::LaunchSwapLeadingAxes");
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status ConvRunner::BackwardData(const Conv2dShape& s, const float* grad_y,
                                      const float* weights, float* grad_x) {
  if (s.batch == 0) return absl::OkStatus();
  Plan p;
  if (absl::Status st = Prepare(s, p); !st.ok()) return st;
  for (int first = 0; first < s.batch; first += p.images) {
    const int images = std::min(p.images, s.batch - first);
    if (absl::Status st =
            Launched(LaunchSwapLeadingAxes(images, s.out_channels, p.area,
                                           grad_y + first * p.image_out,
                                           p.staged, stream_),
                     "cuda::LaunchSwapLeadingAxes");
        !st.ok()) {
      return st;
    }
    // columns [rows, images * area] = W^T * staged.
    if (absl::Status st =
            Gemm(true, false, p.rows, images * p.area, s.out_channels, weights,
                 p.staged, 0.0f, p.columns);
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            Launched(LaunchCol2im(p.geometry, images, p.columns,
                                  grad_x + first * p.image_in, stream_),
                     "cuda::LaunchCol2im");
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status ConvRunner::BackwardFilter(const Conv2dShape& s, const float* x,
                                        const float* grad_y,
                                        float* grad_weights) {
  if (s.batch == 0) {
    PS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
        grad_weights, 0, s.weight_size() * sizeof(float), stream_));
    return absl::OkStatus();
  }
  Plan p;
  if (absl::Status st = Prepare(s, p); !st.ok()) return st;
  for (int first = 0; first < s.batch; first += p.images) {
    const int images = std::min(p.images, s.batch - first);
    if (absl::Status st =
            Launched(LaunchIm2col(p.geometry, images, x + first * p.image_in,
                                  p.columns, stream_),
                     "cuda::LaunchIm2col");
        !st.ok()) {
      return st;
    }
    if (absl::Status st =
            Launched(LaunchSwapLeadingAxes(images, s.out_channels, p.area,
                                           grad_y + first * p.image_out,
                                           p.staged, stream_),
                     "cuda::LaunchSwapLeadingAxes");
        !st.ok()) {
      return st;
    }
    // grad_weights (+)= staged [out_channels, images * area] * columns^T.
    if (absl::Status st =
            Gemm(false, true, s.out_channels, p.rows, images * p.area, p.staged,
                 p.columns, first == 0 ? 0.0f : 1.0f, grad_weights);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace ps::kernels::cuda
