#ifndef PS_KERNELS_CUDA_KERNELS_H_
#define PS_KERNELS_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>

// Host-side launchers of our CUDA kernels (kernels/cuda_kernels.cu), in plain
// C++ so that only that file goes through nvcc. Matrices are row-major and
// every pointer is device memory, except where noted.
//
// Each launcher only enqueues work on `stream` and returns the launch error
// (cudaSuccess, or e.g. cudaErrorInvalidConfiguration); errors of the kernel
// itself surface at the next synchronizing call. A launcher given no elements
// launches nothing. Shapes were checked by the caller.
namespace ps::kernels::cuda {

// y = beta * y over n elements; beta == 0 writes zeros (BLAS semantics, so
// that NaNs already in y do not survive).
cudaError_t LaunchScale(size_t n, float beta, float* y, cudaStream_t stream);

// y[r, c] += bias[c].
cudaError_t LaunchAddBias(int rows, int cols, const float* bias, float* y,
                          cudaStream_t stream);

// y = x < 0 ? 0 : x (NaN stays NaN); x and y may alias.
cudaError_t LaunchRelu(size_t n, const float* x, float* y, cudaStream_t stream);

// grad_x = activation > 0 ? grad_y : 0; grad_x may alias grad_y.
cudaError_t LaunchReluGrad(size_t n, const float* activation,
                           const float* grad_y, float* grad_x,
                           cudaStream_t stream);

// Per row, in float: softmax of the logits (max subtracted), row_loss[r] =
// logsumexp - logit[label], grad = (softmax - onehot(label)) / rows; then
// loss[0] = mean of row_loss, summed in double in a fixed order.
// `row_loss` is scratch of `rows` floats. A label that is not a whole number
// in [0, cols) makes that row's loss and gradient NaN and sets *bad_row
// (device memory, 0 until then) to 1 + that row (one of them when several):
// the caller reports it; the kernel never indexes out of bounds.
cudaError_t LaunchSoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                      const float* labels, float* row_loss,
                                      float* loss, float* grad_logits,
                                      int* bad_row, cudaStream_t stream);

// out[c] = sum over r of x[r, c], summed in a fixed order.
cudaError_t LaunchColumnSum(int rows, int cols, const float* x, float* out,
                            cudaStream_t stream);

// out[r] = index of the largest x[r, c] as a float; ties go to the lowest
// index. Needs cols >= 1.
cudaError_t LaunchArgmaxRows(int rows, int cols, const float* x, float* out,
                             cudaStream_t stream);

}  // namespace ps::kernels::cuda

#endif  // PS_KERNELS_CUDA_KERNELS_H_
