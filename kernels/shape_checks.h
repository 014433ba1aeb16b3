#ifndef PS_KERNELS_SHAPE_CHECKS_H_
#define PS_KERNELS_SHAPE_CHECKS_H_

#include <cstdint>
#include <initializer_list>

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

// Conv2d*: batch >= 0; channels, image and kernel extents and strides >= 1;
// padding >= 0; the kernel no larger than the padded image; and one image's
// input, output and im2col columns (in_channels * kernel area * output
// area) each under 2^31 elements, so that backends may index them with int.
absl::Status CheckConv2dShape(absl::string_view op, const Conv2dShape& shape);

// MaxPool2d* / AvgPool2d*: batch >= 0; channels, image and window extents and
// strides >= 1; the window no larger than the image; a plane of at most 2^24
// elements (so that a float holds any position in it exactly).
absl::Status CheckPool2dShape(absl::string_view op, const Pool2dShape& shape);

// AddChannelBias / ChannelBiasGrad: batch >= 0, channels >= 1, spatial >= 1.
absl::Status CheckChannelShape(absl::string_view op, int batch, int channels,
                               int spatial);

// Dropout*: a rate in [0, 1) (NaN refused).
absl::Status CheckDropoutMask(absl::string_view op, const DropoutMask& mask);

// InvalidArgument if `output` is one of `inputs` (compared by identity).
absl::Status CheckNotAliased(absl::string_view op, absl::string_view name,
                             const DeviceBuffer& output,
                             std::initializer_list<const DeviceBuffer*> inputs);

// InvalidArgument unless `buffer` holds at least `needed` floats.
absl::Status CheckBufferSize(absl::string_view op, absl::string_view arg,
                             const DeviceBuffer& buffer, uint64_t needed);

}  // namespace ps::kernels

#endif  // PS_KERNELS_SHAPE_CHECKS_H_
