#ifndef PS_KERNELS_CPU_DENSE_OPS_H_
#define PS_KERNELS_CPU_DENSE_OPS_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"

// The CPU backend's fully connected layer, activation and loss operations, on
// host pointers whose shapes and sizes the backend has already checked
// (kernels/shape_checks.h). Internal to //kernels:cpu_backend. Matrices are
// row-major; the semantics are Backend's (kernels/backend.h).
namespace ps::kernels::cpu {

// C = alpha * op(A) * op(B) + beta * C through OpenBLAS `cblas_sgemm`, except
// that k == 0 (which BLAS rejects) computes C = beta * C by hand.
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, const float* b, float beta, float* c);

void AddBias(int rows, int cols, const float* bias, float* y);

// A NaN input stays NaN.
void Relu(size_t n, const float* x, float* y);
void ReluGrad(size_t n, const float* activation, const float* grad_y,
              float* grad_x);

// Summed in double, softmax after subtracting the row maximum. Returns
// InvalidArgument, before writing anything, for a label that is not a whole
// number in [0, cols).
absl::Status SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                 const float* labels, float* loss,
                                 float* grad_logits);

// Summed in double, row by row, into `sums` (the caller's scratch, resized
// here and reused across calls).
void ColumnSum(int rows, int cols, const float* x, float* out,
               std::vector<double>& sums);

// Ties go to the lowest index.
void ArgmaxRows(int rows, int cols, const float* x, float* out);

}  // namespace ps::kernels::cpu

#endif  // PS_KERNELS_CPU_DENSE_OPS_H_
