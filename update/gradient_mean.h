#ifndef PS_UPDATE_GRADIENT_MEAN_H_
#define PS_UPDATE_GRADIENT_MEAN_H_

#include <cstddef>

#include "common/tensor_codec.h"

namespace ps::update {

// The loops of a sync step's gradient, g = sum_r (n_r * g_r) / sum_r n_r:
// each push added in double, in rank order, so that the sum is the same
// bits whatever order the pushes arrived in, then divided once. Elementwise
// IEEE operations, compiled for SIMD: the same bits as scalar code.

// sum[i] += weight * g[i], for i < g.size().
void AddWeighted(EncodedFloats g, double weight, double* sum);

// out[i] = float(sum[i] / total), for i < n.
void DivideToFloats(const double* sum, size_t n, double total, float* out);

}  // namespace ps::update

#endif  // PS_UPDATE_GRADIENT_MEAN_H_
