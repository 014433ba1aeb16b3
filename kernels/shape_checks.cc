#include "kernels/shape_checks.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include "absl/strings/str_format.h"

namespace ps::kernels {

uint64_t Product(int a, int b) {
  return static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
}

absl::Status CheckMatrix(absl::string_view op, int rows, int cols) {
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: negative shape rows=%d cols=%d", op, rows, cols));
  }
  return absl::OkStatus();
}

absl::Status CheckGemmShape(int m, int n, int k, const DeviceBuffer& a,
                            const DeviceBuffer& b, const DeviceBuffer& c) {
  if (m < 0 || n < 0 || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Gemm: negative shape m=%d n=%d k=%d", m, n, k));
  }
  if (&c == &a || &c == &b) {
    return absl::InvalidArgumentError(
        "Gemm: the output `c` must not be one of the inputs");
  }
  return absl::OkStatus();
}

absl::Status CheckClassMatrix(absl::string_view op, int rows, int cols) {
  if (rows < 1 || cols < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: needs at least one row and one class, got rows=%d cols=%d", op,
        rows, cols));
  }
  return absl::OkStatus();
}

absl::Status CheckArgmaxShape(int rows, int cols) {
  if (absl::Status s = CheckMatrix("ArgmaxRows", rows, cols); !s.ok()) {
    return s;
  }
  if (cols < 1 && rows > 0) {
    return absl::InvalidArgumentError("ArgmaxRows: rows have no columns");
  }
  return absl::OkStatus();
}

namespace {

constexpr int64_t kMaxImageElements = int64_t{1} << 31;  // Exclusive.

absl::Status CheckAtLeast(absl::string_view op, absl::string_view name,
                          int value, int least) {
  if (value < least) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is %d, must be at least %d", op, name, value, least));
  }
  return absl::OkStatus();
}

// Runs `checks` (name, value, least) in order; the first failure wins.
absl::Status CheckAllAtLeast(
    absl::string_view op,
    std::initializer_list<std::tuple<absl::string_view, int, int>> checks) {
  for (const auto& [name, value, least] : checks) {
    if (absl::Status s = CheckAtLeast(op, name, value, least); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// One image's `what`, the product of `factors` (each >= 1), must hold fewer
// than 2^31 elements. Every partial product checked is below 2^62.
absl::Status CheckImageElements(absl::string_view op, absl::string_view what,
                                std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t factor : factors) {
    if (factor >= kMaxImageElements || product * factor >= kMaxImageElements) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s of one image would hold 2^31 or more elements", op, what));
    }
    product *= factor;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckConv2dShape(absl::string_view op, const Conv2dShape& s) {
  if (absl::Status st =
          CheckAllAtLeast(op, {{"batch", s.batch, 0},
                               {"in_channels", s.in_channels, 1},
                               {"in_height", s.in_height, 1},
                               {"in_width", s.in_width, 1},
                               {"out_channels", s.out_channels, 1},
                               {"kernel_height", s.kernel_height, 1},
                               {"kernel_width", s.kernel_width, 1},
                               {"stride_height", s.stride_height, 1},
                               {"stride_width", s.stride_width, 1},
                               {"pad_height", s.pad_height, 0},
                               {"pad_width", s.pad_width, 0}});
      !st.ok()) {
    return st;
  }
  const int64_t padded_height = s.in_height + int64_t{2} * s.pad_height;
  const int64_t padded_width = s.in_width + int64_t{2} * s.pad_width;
  if (padded_height > std::numeric_limits<int>::max() ||
      padded_width > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: padded image %dx%d does not fit an int", op,
                        padded_height, padded_width));
  }
  if (s.kernel_height > padded_height || s.kernel_width > padded_width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: kernel %dx%d is larger than the padded image %dx%d (image %dx%d, "
        "padding %d, %d)",
        op, s.kernel_height, s.kernel_width, padded_height, padded_width,
        s.in_height, s.in_width, s.pad_height, s.pad_width));
  }
  const int64_t out_area = int64_t{1} * s.out_height() * s.out_width();
  if (absl::Status st = CheckImageElements(
          op, "the input", {s.in_channels, s.in_height, s.in_width});
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          CheckImageElements(op, "the output", {s.out_channels, out_area});
      !st.ok()) {
    return st;
  }
  return CheckImageElements(
      op, "the im2col columns (in_channels x kernel x output area)",
      {s.in_channels, s.kernel_height, s.kernel_width, out_area});
}

absl::Status CheckPool2dShape(absl::string_view op, const Pool2dShape& s) {
  if (absl::Status st =
          CheckAllAtLeast(op, {{"batch", s.batch, 0},
                               {"channels", s.channels, 1},
                               {"in_height", s.in_height, 1},
                               {"in_width", s.in_width, 1},
                               {"window_height", s.window_height, 1},
                               {"window_width", s.window_width, 1},
                               {"stride_height", s.stride_height, 1},
                               {"stride_width", s.stride_width, 1}});
      !st.ok()) {
    return st;
  }
  if (s.window_height > s.in_height || s.window_width > s.in_width) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: window %dx%d is larger than the image %dx%d", op, s.window_height,
        s.window_width, s.in_height, s.in_width));
  }
  if (int64_t{1} * s.in_height * s.in_width > (int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: a plane of %dx%d holds more than 2^24 elements, whose positions "
        "a float cannot hold exactly",
        op, s.in_height, s.in_width));
  }
  return CheckImageElements(op, "the input",
                            {s.channels, s.in_height, s.in_width});
}

absl::Status CheckChannelShape(absl::string_view op, int batch, int channels,
                               int spatial) {
  return CheckAllAtLeast(op, {{"batch", batch, 0},
                              {"channels", channels, 1},
                              {"spatial", spatial, 1}});
}

absl::Status CheckDropoutMask(absl::string_view op, const DropoutMask& mask) {
  if (!(mask.rate >= 0.0f && mask.rate < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: dropout rate %g is not in [0, 1)", op, mask.rate));
  }
  return absl::OkStatus();
}

absl::Status CheckNotAliased(
    absl::string_view op, absl::string_view name, const DeviceBuffer& output,
    std::initializer_list<const DeviceBuffer*> inputs) {
  for (const DeviceBuffer* input : inputs) {
    if (input == &output) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: the output `%s` must not be one of the inputs", op, name));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBufferSize(absl::string_view op, absl::string_view arg,
                             const DeviceBuffer& buffer, uint64_t needed) {
  if (buffer.size() < needed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: buffer `%s` holds %d floats but the shape needs %d", op, arg,
        buffer.size(), needed));
  }
  return absl::OkStatus();
}

}  // namespace ps::kernels
