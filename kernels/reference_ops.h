#ifndef PS_KERNELS_REFERENCE_OPS_H_
#define PS_KERNELS_REFERENCE_OPS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "kernels/backend.h"

// Naive host implementations of the Backend operations, for tests: the
// obvious loops, accumulated in double, so any backend (CPU, CUDA) can be
// compared against something too simple to be wrong. Slow by design; shapes
// must match (checked with assert). Same semantics as kernels/backend.h.
namespace ps::kernels::reference {

// c[m x n] = alpha * op(a) * op(b) + beta * c (beta == 0 ignores old c).
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          absl::Span<const float> a, absl::Span<const float> b, float beta,
          absl::Span<float> c);

// y[r, c] += bias[c].
void AddBias(int rows, int cols, absl::Span<const float> bias,
             absl::Span<float> y);

// y = max(x, 0).
void Relu(absl::Span<const float> x, absl::Span<float> y);

// grad_x = activation > 0 ? grad_y : 0.
void ReluGrad(absl::Span<const float> activation,
              absl::Span<const float> grad_y, absl::Span<float> grad_x);

// Returns the mean over rows of -log softmax(logits)[label] and writes its
// gradient with respect to the logits. Labels must be valid class indices.
double SoftmaxCrossEntropy(int rows, int cols, absl::Span<const float> logits,
                           absl::Span<const float> labels,
                           absl::Span<float> grad_logits);

// out[c] = sum over r of x[r, c].
void ColumnSum(int rows, int cols, absl::Span<const float> x,
               absl::Span<float> out);

// out[r] = lowest index of a largest x[r, c].
void ArgmaxRows(int rows, int cols, absl::Span<const float> x,
                absl::Span<float> out);

// The convolutional-network operations, as kernels/backend.h defines them
// (shapes in Conv2dShape / Pool2dShape), each output element summed on its
// own in double from the definition: no im2col, no GEMM.
void Conv2dForward(const Conv2dShape& shape, absl::Span<const float> x,
                   absl::Span<const float> weights, absl::Span<float> y);
void Conv2dBackwardData(const Conv2dShape& shape,
                        absl::Span<const float> grad_y,
                        absl::Span<const float> weights,
                        absl::Span<float> grad_x);
void Conv2dBackwardFilter(const Conv2dShape& shape, absl::Span<const float> x,
                          absl::Span<const float> grad_y,
                          absl::Span<float> grad_weights);

// y[n, c, p] += bias[c] (one float addition, as any backend does it).
void AddChannelBias(int batch, int channels, int spatial,
                    absl::Span<const float> bias, absl::Span<float> y);
// grad_bias[c] = sum over n, p of grad_y[n, c, p].
void ChannelBiasGrad(int batch, int channels, int spatial,
                     absl::Span<const float> grad_y,
                     absl::Span<float> grad_bias);

// argmax: position in the plane of the first maximum (or first NaN).
void MaxPool2dForward(const Pool2dShape& shape, absl::Span<const float> x,
                      absl::Span<float> y, absl::Span<float> argmax);
void MaxPool2dBackward(const Pool2dShape& shape, absl::Span<const float> grad_y,
                       absl::Span<const float> argmax,
                       absl::Span<float> grad_x);
void AvgPool2dForward(const Pool2dShape& shape, absl::Span<const float> x,
                      absl::Span<float> y);
void AvgPool2dBackward(const Pool2dShape& shape, absl::Span<const float> grad_y,
                       absl::Span<float> grad_x);

// y[i] = x[i] * (kept(i) ? scale : 0), kept and scale from
// kernels/dropout_mask.h (the definition every backend shares).
void Dropout(const DropoutMask& mask, absl::Span<const float> x,
             absl::Span<float> y);

// `n` values uniform in [lo, hi], the same for the same seed on any machine.
std::vector<float> RandomUniform(size_t n, uint64_t seed, float lo = -1.0f,
                                 float hi = 1.0f);

}  // namespace ps::kernels::reference

#endif  // PS_KERNELS_REFERENCE_OPS_H_
