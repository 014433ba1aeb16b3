// The shared conformance suite (kernels/backend_conformance.h), continued:
// pooling and dropout against kernels/reference_ops.h, and the shape errors
// of the convolutional-network operations, which every backend reports
// alike (kernels/shape_checks.h). Tolerances as in cnn_conformance.cc.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "kernels/backend_conformance.h"
#include "kernels/backend_testing.h"
#include "kernels/dropout_mask.h"
#include "kernels/reference_ops.h"

namespace ps::kernels {
namespace {

using ::ps::kernels::testing::Abs;
using ::ps::kernels::testing::AllNear;
using ::ps::kernels::testing::AllWithinRounding;
using ::ps::kernels::testing::Download;
using ::ps::kernels::testing::Unwritten;
using ::ps::kernels::testing::Upload;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Pool2dShape Pool(int batch, int channels, int height, int width,
                 int window_height, int window_width, int stride_height,
                 int stride_width) {
  Pool2dShape s;
  s.batch = batch;
  s.channels = channels;
  s.in_height = height;
  s.in_width = width;
  s.window_height = window_height;
  s.window_width = window_width;
  s.stride_height = stride_height;
  s.stride_width = stride_width;
  return s;
}

std::string Describe(const Pool2dShape& s) {
  return absl::StrFormat("batch=%d in=%dx%dx%d window=%dx%d stride=%d,%d",
                         s.batch, s.channels, s.in_height, s.in_width,
                         s.window_height, s.window_width, s.stride_height,
                         s.stride_width);
}

std::vector<Pool2dShape> PoolShapes() {
  return {
      Pool(2, 3, 7, 6, 2, 2, 2, 2),    // odd height: the last row unpooled
      Pool(1, 2, 5, 5, 3, 3, 1, 1),    // overlapping windows
      Pool(2, 2, 4, 6, 4, 6, 1, 1),    // one window: the whole plane
      Pool(2, 2, 6, 9, 3, 2, 2, 3),    // rectangular window and stride
      Pool(3, 4, 28, 28, 2, 2, 2, 2),  // the CNN's
      Pool(0, 2, 4, 4, 2, 2, 2, 2),    // empty batch
  };
}

// Random values on a grid of quarters, so that windows hold ties.
std::vector<float> WithTies(size_t n, uint64_t seed) {
  std::vector<float> values = reference::RandomUniform(n, seed, -2.0f, 2.0f);
  for (float& v : values) v = std::floor(v * 4.0f) / 4.0f;
  return values;
}

TEST_P(BackendConformanceTest, MaxPool2dMatchesReferenceWithTies) {
  uint64_t seed = 500;
  for (const Pool2dShape& s : PoolShapes()) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> x = WithTies(s.input_size(), ++seed);
    std::vector<float> want_y(s.output_size()), want_argmax(s.output_size());
    reference::MaxPool2dForward(s, x, absl::MakeSpan(want_y),
                                absl::MakeSpan(want_argmax));
    PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
    PS_ASSERT_OK_AND_ASSIGN(auto dy, backend_->Allocate(s.output_size()));
    PS_ASSERT_OK_AND_ASSIGN(auto dargmax, backend_->Allocate(s.output_size()));
    PS_ASSERT_OK(backend_->MaxPool2dForward(s, *dx, *dy, *dargmax));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> y, Download(*backend_, *dy));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> argmax,
                            Download(*backend_, *dargmax));
    EXPECT_TRUE(AllNear(y, want_y, 0, 0));
    EXPECT_TRUE(AllNear(argmax, want_argmax, 0, 0));

    const std::vector<float> grad_y =
        reference::RandomUniform(s.output_size(), ++seed);
    std::vector<float> want(s.input_size()), magnitude(s.input_size());
    reference::MaxPool2dBackward(s, grad_y, want_argmax, absl::MakeSpan(want));
    reference::MaxPool2dBackward(s, Abs(grad_y), want_argmax,
                                 absl::MakeSpan(magnitude));
    PS_ASSERT_OK_AND_ASSIGN(auto dgy, Upload(*backend_, grad_y));
    PS_ASSERT_OK_AND_ASSIGN(auto dgx,
                            Upload(*backend_, Unwritten(s.input_size())));
    PS_ASSERT_OK(backend_->MaxPool2dBackward(s, *dgy, *dargmax, *dgx));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dgx));
    // An element gets at most one term per window holding it.
    EXPECT_TRUE(AllWithinRounding(got, want, magnitude,
                                  s.window_height * s.window_width + 3));
  }
}

TEST_P(BackendConformanceTest, MaxPool2dPropagatesTheFirstNaN) {
  // One 2x3 window: the NaN at position 1 wins over larger numbers and over
  // the later NaN.
  const Pool2dShape s = Pool(1, 1, 2, 3, 2, 3, 1, 1);
  PS_ASSERT_OK_AND_ASSIGN(
      auto dx, Upload(*backend_, {1.0f, kNaN, 9.0f, kNaN, 2.0f, 3.0f}));
  PS_ASSERT_OK_AND_ASSIGN(auto dy, backend_->Allocate(1));
  PS_ASSERT_OK_AND_ASSIGN(auto dargmax, backend_->Allocate(1));
  PS_ASSERT_OK(backend_->MaxPool2dForward(s, *dx, *dy, *dargmax));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> y, Download(*backend_, *dy));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> argmax,
                          Download(*backend_, *dargmax));
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(argmax[0], 1.0f);
}

TEST_P(BackendConformanceTest, AvgPool2dMatchesReference) {
  uint64_t seed = 600;
  for (const Pool2dShape& s : PoolShapes()) {
    SCOPED_TRACE(Describe(s));
    const int terms = s.window_height * s.window_width;
    const std::vector<float> x =
        reference::RandomUniform(s.input_size(), ++seed);
    std::vector<float> want(s.output_size()), magnitude(s.output_size());
    reference::AvgPool2dForward(s, x, absl::MakeSpan(want));
    reference::AvgPool2dForward(s, Abs(x), absl::MakeSpan(magnitude));
    PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
    PS_ASSERT_OK_AND_ASSIGN(auto dy, backend_->Allocate(s.output_size()));
    PS_ASSERT_OK(backend_->AvgPool2dForward(s, *dx, *dy));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dy));
    // The window's sum, then one division.
    EXPECT_TRUE(AllWithinRounding(got, want, magnitude, terms + 4));

    const std::vector<float> grad_y =
        reference::RandomUniform(s.output_size(), ++seed);
    std::vector<float> want_grad(s.input_size()),
        grad_magnitude(s.input_size());
    reference::AvgPool2dBackward(s, grad_y, absl::MakeSpan(want_grad));
    reference::AvgPool2dBackward(s, Abs(grad_y),
                                 absl::MakeSpan(grad_magnitude));
    PS_ASSERT_OK_AND_ASSIGN(auto dgy, Upload(*backend_, grad_y));
    PS_ASSERT_OK_AND_ASSIGN(auto dgx,
                            Upload(*backend_, Unwritten(s.input_size())));
    PS_ASSERT_OK(backend_->AvgPool2dBackward(s, *dgy, *dgx));
    PS_ASSERT_OK_AND_ASSIGN(got, Download(*backend_, *dgx));
    // At most one divided term per window holding the element.
    EXPECT_TRUE(AllWithinRounding(got, want_grad, grad_magnitude, terms + 4));
  }
}

TEST_P(BackendConformanceTest, DropoutMatchesReferenceInBothDirections) {
  uint64_t seed = 700;
  for (float rate : {0.0f, 0.25f, 0.5f, 0.9f}) {
    for (size_t n : {1, 3, 257, 4099}) {
      SCOPED_TRACE(absl::StrFormat("rate=%g n=%d", rate, n));
      DropoutMask mask;
      mask.rate = rate;
      mask.seed = 42;
      mask.step = n;
      mask.first_index = 12345;
      const std::vector<float> x = reference::RandomUniform(n, ++seed);
      std::vector<float> want(n);
      reference::Dropout(mask, x, absl::MakeSpan(want));
      PS_ASSERT_OK_AND_ASSIGN(auto dx, Upload(*backend_, x));
      PS_ASSERT_OK_AND_ASSIGN(auto dy, backend_->Allocate(n));
      PS_ASSERT_OK(backend_->DropoutForward(n, mask, *dx, *dy));
      PS_ASSERT_OK_AND_ASSIGN(std::vector<float> got, Download(*backend_, *dy));
      EXPECT_TRUE(AllNear(got, want, 0, 0));
      // Backward, in place: the same mask and scale.
      PS_ASSERT_OK(backend_->DropoutBackward(n, mask, *dx, *dx));
      PS_ASSERT_OK_AND_ASSIGN(got, Download(*backend_, *dx));
      EXPECT_TRUE(AllNear(got, want, 0, 0));
    }
  }
}

// The fraction dropped is a binomial count: within 6 standard deviations of
// its mean, for this fixed seed, on any backend.
TEST_P(BackendConformanceTest, DropoutDropsTheRateOfElements) {
  constexpr size_t kN = size_t{1} << 16;
  for (float rate : {0.1f, 0.5f, 0.8f}) {
    SCOPED_TRACE(rate);
    DropoutMask mask;
    mask.rate = rate;
    mask.seed = 7;
    PS_ASSERT_OK_AND_ASSIGN(auto dx,
                            Upload(*backend_, std::vector<float>(kN, 1.0f)));
    PS_ASSERT_OK(backend_->DropoutForward(kN, mask, *dx, *dx));
    PS_ASSERT_OK_AND_ASSIGN(std::vector<float> y, Download(*backend_, *dx));
    const float scale = dropout::KeepScale(rate);
    size_t dropped = 0;
    for (float v : y) {
      if (v == 0.0f) {
        ++dropped;
      } else {
        ASSERT_EQ(v, scale);
      }
    }
    const double p = dropout::DropThreshold(rate) / 16777216.0;
    EXPECT_NEAR(dropped, kN * p, 6 * std::sqrt(kN * p * (1 - p)));
  }
}

TEST_P(BackendConformanceTest, DropoutMaskDependsOnSeedStepAndIndexOnly) {
  constexpr size_t kN = 1000, kOffset = 300;
  PS_ASSERT_OK_AND_ASSIGN(auto ones,
                          Upload(*backend_, std::vector<float>(kN, 1.0f)));
  PS_ASSERT_OK_AND_ASSIGN(auto dy, backend_->Allocate(kN));
  auto mask_of = [&](uint64_t seed, uint64_t step, uint64_t first_index,
                     size_t n) -> absl::StatusOr<std::vector<float>> {
    DropoutMask mask;
    mask.rate = 0.5f;
    mask.seed = seed;
    mask.step = step;
    mask.first_index = first_index;
    if (absl::Status s = backend_->DropoutForward(n, mask, *ones, *dy);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::vector<float>> y = Download(*backend_, *dy);
    if (y.ok()) y->resize(n);
    return y;
  };
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> base, mask_of(1, 1, 0, kN));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> again, mask_of(1, 1, 0, kN));
  EXPECT_TRUE(AllNear(again, base, 0, 0));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> next_step, mask_of(1, 2, 0, kN));
  EXPECT_FALSE(AllNear(next_step, base, 0, 0));
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> other_seed, mask_of(2, 1, 0, kN));
  EXPECT_FALSE(AllNear(other_seed, base, 0, 0));
  // The second part of a split batch, given its offset, gets the same mask.
  PS_ASSERT_OK_AND_ASSIGN(std::vector<float> tail,
                          mask_of(1, 1, kOffset, kN - kOffset));
  EXPECT_TRUE(AllNear(
      tail, std::vector<float>(base.begin() + kOffset, base.end()), 0, 0));
}

// --- Errors: shapes first, then buffer sizes, then aliasing.

void ExpectInvalidArgument(const absl::Status& status,
                           absl::string_view names) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find(names), absl::string_view::npos)
      << status << " does not name " << names;
}

TEST_P(BackendConformanceTest, Conv2dRejectsBadShapesNamingTheProblem) {
  PS_ASSERT_OK_AND_ASSIGN(auto a, backend_->Allocate(4096));
  PS_ASSERT_OK_AND_ASSIGN(auto b, backend_->Allocate(4096));
  PS_ASSERT_OK_AND_ASSIGN(auto c, backend_->Allocate(4096));
  Conv2dShape good;
  good.batch = 2;
  good.in_channels = 2;
  good.in_height = 6;
  good.in_width = 6;
  good.out_channels = 3;
  good.kernel_height = 3;
  good.kernel_width = 3;
  PS_ASSERT_OK(backend_->Conv2dForward(good, *a, *b, *c));

  Conv2dShape s = good;
  s.kernel_width = 9;
  ExpectInvalidArgument(backend_->Conv2dForward(s, *a, *b, *c),
                        "Conv2dForward: kernel 3x9 is larger than the padded "
                        "image 6x6");
  s.pad_width = 2;  // 6 + 2 * 2 = 10 columns: the kernel fits.
  PS_ASSERT_OK(backend_->Conv2dForward(s, *a, *b, *c));
  s = good;
  s.stride_height = 0;
  ExpectInvalidArgument(backend_->Conv2dBackwardData(s, *a, *b, *c),
                        "Conv2dBackwardData: stride_height is 0");
  s = good;
  s.pad_width = -1;
  ExpectInvalidArgument(backend_->Conv2dBackwardFilter(s, *a, *b, *c),
                        "Conv2dBackwardFilter: pad_width is -1");
  s = good;
  s.in_channels = 0;
  ExpectInvalidArgument(backend_->Conv2dForward(s, *a, *b, *c),
                        "in_channels is 0");
  s = good;
  s.in_channels = 1 << 20;
  s.kernel_height = s.kernel_width = 64;
  s.pad_height = s.pad_width = 64;
  ExpectInvalidArgument(backend_->Conv2dForward(s, *a, *b, *c),
                        "2^31 or more elements");

  PS_ASSERT_OK_AND_ASSIGN(auto short_weights,
                          backend_->Allocate(good.weight_size() - 1));
  ExpectInvalidArgument(backend_->Conv2dForward(good, *a, *short_weights, *c),
                        "`weights`");
  ExpectInvalidArgument(backend_->Conv2dForward(good, *a, *b, *a), "`y`");
  ExpectInvalidArgument(backend_->Conv2dBackwardData(good, *a, *b, *b),
                        "`grad_x`");
  ExpectInvalidArgument(backend_->Conv2dBackwardFilter(good, *a, *b, *b),
                        "`grad_weights`");
}

TEST_P(BackendConformanceTest, PoolingBiasAndDropoutRejectBadArguments) {
  PS_ASSERT_OK_AND_ASSIGN(auto a, backend_->Allocate(256));
  PS_ASSERT_OK_AND_ASSIGN(auto b, backend_->Allocate(256));
  PS_ASSERT_OK_AND_ASSIGN(auto c, backend_->Allocate(256));
  const Pool2dShape good = Pool(2, 2, 4, 4, 2, 2, 2, 2);
  PS_ASSERT_OK(backend_->MaxPool2dForward(good, *a, *b, *c));
  Pool2dShape s = good;
  s.window_height = 5;
  ExpectInvalidArgument(backend_->MaxPool2dForward(s, *a, *b, *c),
                        "MaxPool2dForward: window 5x2 is larger than the "
                        "image 4x4");
  ExpectInvalidArgument(backend_->AvgPool2dBackward(s, *a, *b),
                        "AvgPool2dBackward: window 5x2");
  s = good;
  s.stride_width = -2;
  ExpectInvalidArgument(backend_->AvgPool2dForward(s, *a, *b),
                        "stride_width is -2");
  ExpectInvalidArgument(backend_->MaxPool2dForward(good, *a, *b, *b), "`y`");
  ExpectInvalidArgument(backend_->MaxPool2dBackward(good, *a, *b, *b),
                        "`grad_x`");
  s = good;
  s.channels = 64;  // 2 x 64 x 16 floats do not fit 256.
  ExpectInvalidArgument(backend_->AvgPool2dForward(s, *a, *b), "`x`");

  ExpectInvalidArgument(backend_->AddChannelBias(1, 0, 4, *a, *b),
                        "AddChannelBias: channels is 0");
  ExpectInvalidArgument(backend_->ChannelBiasGrad(1, 4, 65, *a, *b),
                        "ChannelBiasGrad: buffer `grad_y`");

  for (float rate : {1.0f, -0.1f, 2.0f, kNaN}) {
    SCOPED_TRACE(rate);
    DropoutMask mask;
    mask.rate = rate;
    ExpectInvalidArgument(backend_->DropoutForward(4, mask, *a, *b),
                          "DropoutForward: dropout rate");
    ExpectInvalidArgument(backend_->DropoutBackward(4, mask, *a, *b),
                          "DropoutBackward: dropout rate");
  }
  ExpectInvalidArgument(backend_->DropoutForward(257, DropoutMask(), *a, *b),
                        "`x`");
}

}  // namespace
}  // namespace ps::kernels
