// The shared conformance suite (kernels/backend_conformance.h), continued:
// the convolutional-network operations against kernels/reference_ops.h, on
// awkward shapes (padding wider than the kernel, strides that leave rows
// unread, 1x1 kernels, kernels covering the whole padded image), and the
// shape errors every backend reports alike (kernels/shape_checks.h).
//
// Tolerances come from the arithmetic: a result that is a k-term float32 sum
// may be off by (k + 3) roundings of the sum of its terms' absolute values
// (computed by the reference on |inputs|), whatever the order or FMA use.
// Operations that round once (bias, dropout, max pooling) must be exact.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "kernels/backend_conformance.h"
#include "kernels/backend_testing.h"
#include "kernels/reference_ops.h"

namespace ps::kernels {
namespace {

using ::ps::kernels::testing::Abs;
using ::ps::kernels::testing::AllNear;
using ::ps::kernels::testing::AllWithinRounding;
using ::ps::kernels::testing::Download;
using ::ps::kernels::testing::Unwritten;
using ::ps::kernels::testing::Upload;

Conv2dShape Conv(int batch, int in_channels, int height, int width,
                 int out_channels, int kernel_height, int kernel_width,
                 int stride_height, int stride_width, int pad_height,
                 int pad_width) {
  Conv2dShape s;
  s.batch = batch;
  s.in_channels = in_channels;
  s.in_height = height;
  s.in_width = width;
  s.out_channels = out_channels;
  s.kernel_height = kernel_height;
  s.kernel_width = kernel_width;
  s.stride_height = stride_height;
  s.stride_width = stride_width;
  s.pad_height = pad_height;
  s.pad_width = pad_width;
  return s;
}

std::string Describe(const Conv2dShape& s) {
  return absl::StrFormat(
      "batch=%d in=%dx%dx%d out_channels=%d kernel=%dx%d stride=%d,%d "
      "pad=%d,%d",
      s.batch, s.in_channels, s.in_height, s.in_width, s.out_channels,
      s.kernel_height, s.kernel_width, s.stride_height, s.stride_width,
      s.pad_height, s.pad_width);
}

// Sizes go up and down, so that scratch kept between calls is both grown
// and reused.
std::vector<Conv2dShape> ConvShapes() {
  return {
      Conv(2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1),     // "same" padding
      Conv(2, 2, 9, 8, 3, 3, 2, 2, 2, 0, 0),     // strided, non-square kernel
      Conv(3, 8, 14, 14, 16, 5, 5, 1, 1, 2, 2),  // the CNN's second layer, less
      Conv(1, 2, 10, 7, 2, 4, 4, 3, 3, 2, 2),    // stride 3: rows left unread
      Conv(3, 5, 4, 6, 3, 1, 1, 1, 1, 0, 0),     // 1x1: image = its columns
      Conv(2, 2, 3, 3, 3, 5, 5, 1, 1, 1, 1),     // kernel = the padded image
      Conv(1, 1, 2, 2, 2, 2, 2, 1, 1, 3, 3),     // outputs seeing only padding
      Conv(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0),     // one element
  };
}

TEST_P(BackendConformanceTest, Conv2dForwardMatchesReference) {
  uint64_t seed = 100;
  for (const Conv2dShape& s : ConvShapes()) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> x =
        reference::RandomUniform(s.input_size(), ++seed);
    const std::vector<float> w =
        reference::RandomUniform(s.weight_size(), ++seed);
    std::vector<float> want(s.output_size()), magnitude(s.output_size());
    reference::Conv2dForward(s, x, w, absl::MakeSpan(want));
    reference::Conv2dForward(s, Abs(x), Abs(w), absl::MakeSpan(magnitude));
    PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
    PS_ASSERT_OK_AND_ASSIGN(auto dw, Upload(*backend_, w));
    PS_ASSERT_OK_AND_ASSIGN(auto dy,
                            Upload(*backend_, Unwritten(s.output_size())));
    PS_ASSERT_OK(backend_->Conv2dForward(s, *dx, *dw, *dy));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dy));
    const int terms = s.in_channels * s.kernel_height * s.kernel_width;
    EXPECT_TRUE(AllWithinRounding(got, want, magnitude, terms + 3));
  }
}

TEST_P(BackendConformanceTest, Conv2dBackwardDataMatchesReference) {
  uint64_t seed = 200;
  for (const Conv2dShape& s : ConvShapes()) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> grad_y =
        reference::RandomUniform(s.output_size(), ++seed);
    const std::vector<float> w =
        reference::RandomUniform(s.weight_size(), ++seed);
    std::vector<float> want(s.input_size()), magnitude(s.input_size());
    reference::Conv2dBackwardData(s, grad_y, w, absl::MakeSpan(want));
    reference::Conv2dBackwardData(s, Abs(grad_y), Abs(w),
                                  absl::MakeSpan(magnitude));
    PS_ASSERT_OK_AND_ASSIGN(auto dgy, Upload(*backend_, grad_y));
    PS_ASSERT_OK_AND_ASSIGN(auto dw, Upload(*backend_, w));
    PS_ASSERT_OK_AND_ASSIGN(auto dgx,
                            Upload(*backend_, Unwritten(s.input_size())));
    PS_ASSERT_OK(backend_->Conv2dBackwardData(s, *dgy, *dw, *dgx));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dgx));
    // At most out_channels x kernel area products reach one input element.
    const int terms = s.out_channels * s.kernel_height * s.kernel_width;
    EXPECT_TRUE(AllWithinRounding(got, want, magnitude, terms + 3));
  }
}

TEST_P(BackendConformanceTest, Conv2dBackwardFilterMatchesReference) {
  uint64_t seed = 300;
  for (const Conv2dShape& s : ConvShapes()) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> x =
        reference::RandomUniform(s.input_size(), ++seed);
    const std::vector<float> grad_y =
        reference::RandomUniform(s.output_size(), ++seed);
    std::vector<float> want(s.weight_size()), magnitude(s.weight_size());
    reference::Conv2dBackwardFilter(s, x, grad_y, absl::MakeSpan(want));
    reference::Conv2dBackwardFilter(s, Abs(x), Abs(grad_y),
                                    absl::MakeSpan(magnitude));
    PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
    PS_ASSERT_OK_AND_ASSIGN(auto dgy, Upload(*backend_, grad_y));
    PS_ASSERT_OK_AND_ASSIGN(auto dgw,
                            Upload(*backend_, Unwritten(s.weight_size())));
    PS_ASSERT_OK(backend_->Conv2dBackwardFilter(s, *dx, *dgy, *dgw));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dgw));
    const int terms = s.batch * s.out_height() * s.out_width();
    EXPECT_TRUE(AllWithinRounding(got, want, magnitude, terms + 3));
  }
}

TEST_P(BackendConformanceTest, Conv2dOfAnEmptyBatchHasZeroFilterGradient) {
  const Conv2dShape s = Conv(0, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1);
  PS_ASSERT_OK_AND_ASSIGN(auto empty, backend_->Allocate(0));
  PS_ASSERT_OK_AND_ASSIGN(auto empty_out, backend_->Allocate(0));
  PS_ASSERT_OK_AND_ASSIGN(auto w,
                          Upload(*backend_, Unwritten(s.weight_size())));
  PS_ASSERT_OK(backend_->Conv2dForward(s, *empty, *w, *empty_out));
  PS_ASSERT_OK(backend_->Conv2dBackwardData(s, *empty, *w, *empty_out));
  PS_ASSERT_OK(backend_->Conv2dBackwardFilter(s, *empty, *empty_out, *w));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *w));
  EXPECT_TRUE(AllNear(got, std::vector<float>(s.weight_size(), 0.0f), 0, 0));
}

TEST_P(BackendConformanceTest, ChannelBiasMatchesReference) {
  struct ChannelShape {
    int batch, channels, spatial;
  };
  constexpr ChannelShape kShapes[] = {{1, 1, 1}, {2, 3, 5}, {3, 16, 196}};
  uint64_t seed = 400;
  for (const ChannelShape& s : kShapes) {
    SCOPED_TRACE(absl::StrFormat("batch=%d channels=%d spatial=%d", s.batch,
                                 s.channels, s.spatial));
    const size_t n = size_t{1} * s.batch * s.channels * s.spatial;
    const std::vector<float> bias =
        reference::RandomUniform(s.channels, ++seed);
    const std::vector<float> y = reference::RandomUniform(n, ++seed);
    std::vector<float> want = y;
    reference::AddChannelBias(s.batch, s.channels, s.spatial, bias,
                              absl::MakeSpan(want));
    PS_ASSERT_OK_AND_ASSIGN(auto dbias, Upload(*backend_, bias));
    PS_ASSERT_OK_AND_ASSIGN(auto dy, Upload(*backend_, y));
    PS_ASSERT_OK(
        backend_->AddChannelBias(s.batch, s.channels, s.spatial, *dbias, *dy));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dy));
    EXPECT_TRUE(AllNear(got, want, 0, 0));

    std::vector<float> want_grad(s.channels), magnitude(s.channels);
    reference::ChannelBiasGrad(s.batch, s.channels, s.spatial, y,
                               absl::MakeSpan(want_grad));
    reference::ChannelBiasGrad(s.batch, s.channels, s.spatial, Abs(y),
                               absl::MakeSpan(magnitude));
    PS_ASSERT_OK_AND_ASSIGN(auto dgy, Upload(*backend_, y));
    PS_ASSERT_OK_AND_ASSIGN(auto dgrad,
                            Upload(*backend_, Unwritten(s.channels)));
    PS_ASSERT_OK(backend_->ChannelBiasGrad(s.batch, s.channels, s.spatial, *dgy,
                                           *dgrad));
    PS_ASSERT_OK_AND_ASSIGN(got, Download(*backend_, *dgrad));
    EXPECT_TRUE(
        AllWithinRounding(got, want_grad, magnitude, s.batch * s.spatial + 3));
  }
}

}  // namespace
}  // namespace ps::kernels
