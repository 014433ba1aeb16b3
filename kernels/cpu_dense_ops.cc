#include "kernels/cpu_dense_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/shape_checks.h"

namespace ps::kernels::cpu {

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          const float* a, const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS rejects a zero leading dimension; C = beta * C by hand, where
    // beta == 0 overwrites (as in BLAS) rather than scaling old values.
    for (uint64_t i = 0; i < Product(m, n); ++i) {
      c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
              trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

void AddBias(int rows, int cols, const float* bias, float* y) {
  for (int r = 0; r < rows; ++r) {
    float* row = y + Product(r, cols);
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void Relu(size_t n, const float* x, float* y) {
  // Written so that a NaN input stays NaN instead of being hidden as 0.
  for (size_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

void ReluGrad(size_t n, const float* activation, const float* grad_y,
              float* grad_x) {
  for (size_t i = 0; i < n; ++i) {
    grad_x[i] = activation[i] > 0.0f ? grad_y[i] : 0.0f;
  }
}

absl::Status SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                 const float* labels, float* loss,
                                 float* grad_logits) {
  constexpr absl::string_view kOp = "SoftmaxCrossEntropy";
  // Every label is checked before anything is written.
  for (int r = 0; r < rows; ++r) {
    const float l = labels[r];
    if (!(l >= 0.0f && l < static_cast<float>(cols) && l == std::floor(l))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: label %g of row %d is not a class index in "
                          "[0, %d)",
                          kOp, l, r, cols));
    }
  }
  const double inv_rows = 1.0 / rows;
  double total = 0.0;
  for (int r = 0; r < rows; ++r) {
    const float* x = logits + Product(r, cols);
    float* g = grad_logits + Product(r, cols);
    // Subtracting the maximum keeps exp() from overflowing.
    double max = x[0];
    for (int c = 1; c < cols; ++c) max = std::max<double>(max, x[c]);
    double sum = 0.0;
    for (int c = 0; c < cols; ++c) sum += std::exp(x[c] - max);
    const double log_sum_exp = max + std::log(sum);
    const int target = static_cast<int>(labels[r]);
    total += log_sum_exp - x[target];
    for (int c = 0; c < cols; ++c) {
      const double p = std::exp(x[c] - log_sum_exp);
      g[c] = static_cast<float>(((c == target) ? p - 1.0 : p) * inv_rows);
    }
  }
  loss[0] = static_cast<float>(total * inv_rows);
  return absl::OkStatus();
}

void ColumnSum(int rows, int cols, const float* x, float* out,
               std::vector<double>& sums) {
  // Row by row for locality.
  sums.assign(cols, 0.0);
  for (int r = 0; r < rows; ++r) {
    const float* row = x + Product(r, cols);
    for (int c = 0; c < cols; ++c) sums[c] += row[c];
  }
  for (int c = 0; c < cols; ++c) out[c] = static_cast<float>(sums[c]);
}

void ArgmaxRows(int rows, int cols, const float* x, float* out) {
  for (int r = 0; r < rows; ++r) {
    const float* row = x + Product(r, cols);
    int best = 0;  // Ties go to the lowest index.
    for (int c = 1; c < cols; ++c) {
      if (row[c] > row[best]) best = c;
    }
    out[r] = static_cast<float>(best);
  }
}

}  // namespace ps::kernels::cpu
