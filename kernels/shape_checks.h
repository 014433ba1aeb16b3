#ifndef PS_KERNELS_SHAPE_CHECKS_H_
#define PS_KERNELS_SHAPE_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/backend.h"

namespace ps::kernels {

// The argument checks every backend makes before touching memory, in one
// place, so that a call one backend refuses is refused by all with the same
// message. Whether a buffer belongs to the backend is each backend's own
// check.

// rows * cols without int overflow.
uint64_t Product(int a, int b);

// InvalidArgument if rows or cols is negative.
absl::Status CheckMatrix(absl::string_view op, int rows, int cols);

// Gemm: no negative dimension, and the output is neither input.
absl::Status CheckGemmShape(int m, int n, int k, const DeviceBuffer& a,
                            const DeviceBuffer& b, const DeviceBuffer& c);

// SoftmaxCrossEntropy: at least one row and one class.
absl::Status CheckClassMatrix(absl::string_view op, int rows, int cols);

// ArgmaxRows: a matrix whose rows, if any, have columns.
absl::Status CheckArgmaxShape(int rows, int cols);

// InvalidArgument unless `buffer` holds at least `needed` floats.
absl::Status CheckBufferSize(absl::string_view op, absl::string_view arg,
                             const DeviceBuffer& buffer, uint64_t needed);

}  // namespace ps::kernels

#endif  // PS_KERNELS_SHAPE_CHECKS_H_
