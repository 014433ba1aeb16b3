#ifndef PS_KERNELS_CPU_CNN_OPS_H_
#define PS_KERNELS_CPU_CNN_OPS_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "kernels/backend.h"

// The CPU backend's convolution, pooling and dropout loops, on host pointers
// whose shapes and sizes the backend has already checked (kernels/
// shape_checks.h). Internal to //kernels:cpu_backend.
//
// Convolutions run image by image as im2col + one OpenBLAS sgemm (forward,
// and both backward passes, the data gradient through col2im), so that each
// GEMM reads and writes NCHW in place. `columns` is the caller's scratch for
// one image's im2col matrix (in_channels * kernel area rows, output area
// columns), grown here when too small and reused across calls.
namespace ps::kernels::cpu {

void Conv2dForward(const Conv2dShape& shape, const float* x, const float* w,
                   float* y, std::vector<float>& columns);
void Conv2dBackwardData(const Conv2dShape& shape, const float* grad_y,
                        const float* w, float* grad_x,
                        std::vector<float>& columns);
void Conv2dBackwardFilter(const Conv2dShape& shape, const float* x,
                          const float* grad_y, float* grad_w,
                          std::vector<float>& columns);

void AddChannelBias(int batch, int channels, int spatial, const float* bias,
                    float* y);
// Summed in double.
void ChannelBiasGrad(int batch, int channels, int spatial, const float* grad_y,
                     float* grad_bias);

void MaxPool2dForward(const Pool2dShape& shape, const float* x, float* y,
                      float* argmax);
// InvalidArgument, before writing anything, when an argmax entry is not a
// position inside its own window.
absl::Status MaxPool2dBackward(const Pool2dShape& shape, const float* grad_y,
                               const float* argmax, float* grad_x);
void AvgPool2dForward(const Pool2dShape& shape, const float* x, float* y);
void AvgPool2dBackward(const Pool2dShape& shape, const float* grad_y,
                       float* grad_x);

// y = x * (kept ? scale : 0); x and y may alias.
void Dropout(size_t n, const DropoutMask& mask, const float* x, float* y);

}  // namespace ps::kernels::cpu

#endif  // PS_KERNELS_CPU_CNN_OPS_H_
