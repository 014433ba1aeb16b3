#include "kernels/cpu_cnn_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/dropout_mask.h"

namespace ps::kernels::cpu {
namespace {

size_t Area(int height, int width) { return size_t{1} * height * width; }

// Rows of the im2col matrix: one per (input channel, kernel tap).
int ColumnRows(const Conv2dShape& s) {
  return s.in_channels * s.kernel_height * s.kernel_width;
}

// A 1x1 kernel at stride 1 without padding reads each image as it lies: the
// image is its own im2col matrix.
bool ImageIsItsColumns(const Conv2dShape& s) {
  return s.kernel_height == 1 && s.kernel_width == 1 && s.stride_height == 1 &&
         s.stride_width == 1 && s.pad_height == 0 && s.pad_width == 0;
}

// The output positions [*lo, *hi) out of `out` whose input position
// o * stride + tap - pad lies inside [0, in): the rest read padding.
void InsideRange(int out, int stride, int pad, int tap, int in, int* lo,
                 int* hi) {
  auto first_at_least = [stride](int64_t bound) {
    return bound <= 0 ? int64_t{0} : (bound + stride - 1) / stride;
  };
  *lo = static_cast<int>(std::min<int64_t>(first_at_least(pad - tap), out));
  *hi = static_cast<int>(
      std::min<int64_t>(first_at_least(int64_t{in} + pad - tap), out));
  *hi = std::max(*hi, *lo);
}

// Calls visit(row, out_offset, in_offset, count) for every run of im2col
// elements of one image that read the image: `count` elements of im2col row
// `row` from column `out_offset`, reading the image from `in_offset` on at
// the width stride. pad(row, out_offset, count) gets the runs that read
// padding. Shared by im2col and col2im so that both agree.
template <typename Visit, typename Pad>
void ForEachRun(const Conv2dShape& s, Visit visit, Pad pad) {
  const int oh = s.out_height(), ow = s.out_width();
  int row = 0;
  for (int c = 0; c < s.in_channels; ++c) {
    for (int u = 0; u < s.kernel_height; ++u) {
      for (int v = 0; v < s.kernel_width; ++v, ++row) {
        int j_lo, j_hi;
        InsideRange(ow, s.stride_width, s.pad_width, v, s.in_width, &j_lo,
                    &j_hi);
        for (int i = 0; i < oh; ++i) {
          const size_t out = size_t{1} * i * ow;
          const int h = i * s.stride_height + u - s.pad_height;
          if (h < 0 || h >= s.in_height) {
            pad(row, out, ow);
            continue;
          }
          pad(row, out, j_lo);
          if (j_hi > j_lo) {
            // Column j_lo reads input column j_lo * stride + v - pad >= 0.
            const size_t in =
                (size_t{1} * c * s.in_height + h) * s.in_width +
                static_cast<size_t>(int64_t{j_lo} * s.stride_width + v -
                                    s.pad_width);
            visit(row, out + j_lo, in, j_hi - j_lo);
          }
          pad(row, out + j_hi, ow - j_hi);
        }
      }
    }
  }
}

void Im2col(const Conv2dShape& s, const float* image, float* columns) {
  const size_t area = Area(s.out_height(), s.out_width());
  const int stride = s.stride_width;
  ForEachRun(
      s,
      [&](int row, size_t out, size_t in, int count) {
        float* dst = columns + row * area + out;
        const float* src = image + in;
        if (stride == 1) {
          std::copy(src, src + count, dst);
        } else {
          for (int j = 0; j < count; ++j) dst[j] = src[size_t{1} * j * stride];
        }
      },
      [&](int row, size_t out, int count) {
        std::fill_n(columns + row * area + out, count, 0.0f);
      });
}

// image += the im2col matrix `columns` folded back: each element adds into
// the input position it was read from.
void Col2imAdd(const Conv2dShape& s, const float* columns, float* image) {
  const size_t area = Area(s.out_height(), s.out_width());
  const int stride = s.stride_width;
  ForEachRun(
      s,
      [&](int row, size_t out, size_t in, int count) {
        const float* src = columns + row * area + out;
        float* dst = image + in;
        for (int j = 0; j < count; ++j) dst[size_t{1} * j * stride] += src[j];
      },
      [](int, size_t, int) {});
}

// Grows `columns` to `s`'s im2col matrix, to exactly its size: its capacity
// is what CpuBackend reports as its scratch (Backend::conv_scratch_bytes).
void GrowColumns(const Conv2dShape& s, std::vector<float>& columns) {
  const size_t n = s.im2col_size();
  if (columns.size() >= n) return;
  columns.reserve(n);
  columns.resize(n);
}

}  // namespace

void Conv2dForward(const Conv2dShape& s, const float* x, const float* w,
                   float* y, std::vector<float>& columns) {
  const int rows = ColumnRows(s);
  const int area = s.out_height() * s.out_width();
  const size_t image_size = Area(s.in_height, s.in_width) * s.in_channels;
  const bool direct = ImageIsItsColumns(s);
  GrowColumns(s, columns);
  for (int n = 0; n < s.batch; ++n) {
    const float* image = x + n * image_size;
    if (!direct) Im2col(s, image, columns.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.out_channels, area,
                rows, 1.0f, w, rows, direct ? image : columns.data(), area,
                0.0f, y + size_t{1} * n * s.out_channels * area, area);
  }
}

void Conv2dBackwardData(const Conv2dShape& s, const float* grad_y,
                        const float* w, float* grad_x,
                        std::vector<float>& columns) {
  const int rows = ColumnRows(s);
  const int area = s.out_height() * s.out_width();
  const size_t image_size = Area(s.in_height, s.in_width) * s.in_channels;
  const bool direct = ImageIsItsColumns(s);
  GrowColumns(s, columns);
  for (int n = 0; n < s.batch; ++n) {
    float* image = grad_x + n * image_size;
    // columns = W^T [rows x out_channels] * grad_y[n] [out_channels x area].
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, area,
                s.out_channels, 1.0f, w, rows,
                grad_y + size_t{1} * n * s.out_channels * area, area, 0.0f,
                direct ? image : columns.data(), area);
    if (direct) continue;
    std::fill_n(image, image_size, 0.0f);
    Col2imAdd(s, columns.data(), image);
  }
}

void Conv2dBackwardFilter(const Conv2dShape& s, const float* x,
                          const float* grad_y, float* grad_w,
                          std::vector<float>& columns) {
  const int rows = ColumnRows(s);
  const int area = s.out_height() * s.out_width();
  const size_t image_size = Area(s.in_height, s.in_width) * s.in_channels;
  const bool direct = ImageIsItsColumns(s);
  if (s.batch == 0) {
    std::fill_n(grad_w, s.weight_size(), 0.0f);
    return;
  }
  GrowColumns(s, columns);
  for (int n = 0; n < s.batch; ++n) {
    const float* image = x + n * image_size;
    if (!direct) Im2col(s, image, columns.data());
    // grad_w (+)= grad_y[n] [out_channels x area] * columns^T [area x rows].
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.out_channels, rows,
                area, 1.0f, grad_y + size_t{1} * n * s.out_channels * area,
                area, direct ? image : columns.data(), area,
                n == 0 ? 0.0f : 1.0f, grad_w, rows);
  }
}

void AddChannelBias(int batch, int channels, int spatial, const float* bias,
                    float* y) {
  for (int n = 0; n < batch; ++n) {
    for (int c = 0; c < channels; ++c) {
      float* plane = y + (size_t{1} * n * channels + c) * spatial;
      const float b = bias[c];
      for (int p = 0; p < spatial; ++p) plane[p] += b;
    }
  }
}

void ChannelBiasGrad(int batch, int channels, int spatial, const float* grad_y,
                     float* grad_bias) {
  for (int c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (int n = 0; n < batch; ++n) {
      const float* plane = grad_y + (size_t{1} * n * channels + c) * spatial;
      for (int p = 0; p < spatial; ++p) sum += plane[p];
    }
    grad_bias[c] = static_cast<float>(sum);
  }
}

void MaxPool2dForward(const Pool2dShape& s, const float* x, float* y,
                      float* argmax) {
  const int oh = s.out_height(), ow = s.out_width();
  const size_t in_plane = Area(s.in_height, s.in_width);
  const size_t out_plane = Area(oh, ow);
  for (size_t p = 0; p < size_t{1} * s.batch * s.channels; ++p) {
    const float* in = x + p * in_plane;
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        int best_at = i * s.stride_height * s.in_width + j * s.stride_width;
        float best = in[best_at];
        for (int u = 0; u < s.window_height; ++u) {
          const int row = (i * s.stride_height + u) * s.in_width;
          for (int v = 0; v < s.window_width; ++v) {
            const int at = row + j * s.stride_width + v;
            const float value = in[at];
            // The first NaN wins and stays: a NaN input is not hidden.
            if (!std::isnan(best) && (std::isnan(value) || value > best)) {
              best = value;
              best_at = at;
            }
          }
        }
        const size_t out = p * out_plane + size_t{1} * i * ow + j;
        y[out] = best;
        argmax[out] = static_cast<float>(best_at);
      }
    }
  }
}

absl::Status MaxPool2dBackward(const Pool2dShape& s, const float* grad_y,
                               const float* argmax, float* grad_x) {
  const int oh = s.out_height(), ow = s.out_width();
  const size_t in_plane = Area(s.in_height, s.in_width);
  const size_t out_plane = Area(oh, ow);
  const size_t planes = size_t{1} * s.batch * s.channels;
  // Every position is checked before anything is written.
  for (size_t p = 0; p < planes; ++p) {
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        const size_t out = p * out_plane + size_t{1} * i * ow + j;
        const float at = argmax[out];
        bool inside = at >= 0.0f && at < static_cast<float>(in_plane) &&
                      at == std::floor(at);
        if (inside) {
          const int h = static_cast<int>(at) / s.in_width;
          const int w = static_cast<int>(at) % s.in_width;
          inside = h >= i * s.stride_height &&
                   h < i * s.stride_height + s.window_height &&
                   w >= j * s.stride_width &&
                   w < j * s.stride_width + s.window_width;
        }
        if (!inside) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "MaxPool2dBackward: argmax %g of output %d is not a position in "
              "that output's window",
              at, out));
        }
      }
    }
  }
  std::fill_n(grad_x, planes * in_plane, 0.0f);
  for (size_t p = 0; p < planes; ++p) {
    float* dst = grad_x + p * in_plane;
    for (size_t o = 0; o < out_plane; ++o) {
      const size_t out = p * out_plane + o;
      dst[static_cast<size_t>(argmax[out])] += grad_y[out];
    }
  }
  return absl::OkStatus();
}

void AvgPool2dForward(const Pool2dShape& s, const float* x, float* y) {
  const int oh = s.out_height(), ow = s.out_width();
  const size_t in_plane = Area(s.in_height, s.in_width);
  const size_t out_plane = Area(oh, ow);
  const float window = static_cast<float>(s.window_height * s.window_width);
  for (size_t p = 0; p < size_t{1} * s.batch * s.channels; ++p) {
    const float* in = x + p * in_plane;
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        float sum = 0.0f;
        for (int u = 0; u < s.window_height; ++u) {
          const float* row =
              in + size_t{1} * (i * s.stride_height + u) * s.in_width +
              j * s.stride_width;
          for (int v = 0; v < s.window_width; ++v) sum += row[v];
        }
        y[p * out_plane + size_t{1} * i * ow + j] = sum / window;
      }
    }
  }
}

void AvgPool2dBackward(const Pool2dShape& s, const float* grad_y,
                       float* grad_x) {
  const int oh = s.out_height(), ow = s.out_width();
  const size_t in_plane = Area(s.in_height, s.in_width);
  const size_t out_plane = Area(oh, ow);
  const size_t planes = size_t{1} * s.batch * s.channels;
  const float window = static_cast<float>(s.window_height * s.window_width);
  std::fill_n(grad_x, planes * in_plane, 0.0f);
  for (size_t p = 0; p < planes; ++p) {
    float* dst = grad_x + p * in_plane;
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        const float g = grad_y[p * out_plane + size_t{1} * i * ow + j] / window;
        for (int u = 0; u < s.window_height; ++u) {
          float* row = dst +
                       size_t{1} * (i * s.stride_height + u) * s.in_width +
                       j * s.stride_width;
          for (int v = 0; v < s.window_width; ++v) row[v] += g;
        }
      }
    }
  }
}

void Dropout(size_t n, const DropoutMask& mask, const float* x, float* y) {
  const uint64_t key = dropout::StepKey(mask.seed, mask.step);
  const uint32_t threshold = dropout::DropThreshold(mask.rate);
  const float scale = dropout::KeepScale(mask.rate);
  for (size_t i = 0; i < n; ++i) {
    y[i] = x[i] *
           (dropout::Kept(key, mask.first_index + i, threshold) ? scale : 0.0f);
  }
}

}  // namespace ps::kernels::cpu
