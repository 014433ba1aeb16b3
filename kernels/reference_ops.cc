#include "kernels/reference_ops.h"

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/dropout_mask.h"

namespace ps::kernels::reference {
namespace {

size_t At(int row, int col, int cols) {
  return static_cast<size_t>(row) * cols + col;
}

}  // namespace

void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
          absl::Span<const float> a, absl::Span<const float> b, float beta,
          absl::Span<float> c) {
  assert(a.size() >= static_cast<size_t>(m) * k);
  assert(b.size() >= static_cast<size_t>(k) * n);
  assert(c.size() >= static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) {
        const double a_ip = trans_a ? a[At(p, i, m)] : a[At(i, p, k)];
        const double b_pj = trans_b ? b[At(j, p, k)] : b[At(p, j, n)];
        sum += a_ip * b_pj;
      }
      const double old = beta == 0.0f ? 0.0 : beta * c[At(i, j, n)];
      c[At(i, j, n)] = static_cast<float>(alpha * sum + old);
    }
  }
}

void AddBias(int rows, int cols, absl::Span<const float> bias,
             absl::Span<float> y) {
  assert(bias.size() >= static_cast<size_t>(cols));
  assert(y.size() >= static_cast<size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) y[At(r, c, cols)] += bias[c];
  }
}

void Relu(absl::Span<const float> x, absl::Span<float> y) {
  assert(y.size() >= x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void ReluGrad(absl::Span<const float> activation,
              absl::Span<const float> grad_y, absl::Span<float> grad_x) {
  assert(grad_y.size() >= activation.size());
  assert(grad_x.size() >= activation.size());
  for (size_t i = 0; i < activation.size(); ++i) {
    grad_x[i] = activation[i] > 0.0f ? grad_y[i] : 0.0f;
  }
}

double SoftmaxCrossEntropy(int rows, int cols, absl::Span<const float> logits,
                           absl::Span<const float> labels,
                           absl::Span<float> grad_logits) {
  assert(rows > 0 && cols > 0);
  assert(logits.size() >= static_cast<size_t>(rows) * cols);
  assert(labels.size() >= static_cast<size_t>(rows));
  assert(grad_logits.size() >= static_cast<size_t>(rows) * cols);
  double total = 0.0;
  std::vector<double> p(cols);
  for (int r = 0; r < rows; ++r) {
    const int label = static_cast<int>(labels[r]);
    assert(label >= 0 && label < cols);
    double max = logits[At(r, 0, cols)];
    for (int c = 0; c < cols; ++c) max = std::fmax(max, logits[At(r, c, cols)]);
    double sum = 0.0;
    for (int c = 0; c < cols; ++c) {
      p[c] = std::exp(logits[At(r, c, cols)] - max);
      sum += p[c];
    }
    for (int c = 0; c < cols; ++c) p[c] /= sum;
    // -log p[label], without taking the log of an underflowed p.
    total += max + std::log(sum) - logits[At(r, label, cols)];
    for (int c = 0; c < cols; ++c) {
      grad_logits[At(r, c, cols)] =
          static_cast<float>((p[c] - (c == label ? 1.0 : 0.0)) / rows);
    }
  }
  return total / rows;
}

void ColumnSum(int rows, int cols, absl::Span<const float> x,
               absl::Span<float> out) {
  assert(x.size() >= static_cast<size_t>(rows) * cols);
  assert(out.size() >= static_cast<size_t>(cols));
  for (int c = 0; c < cols; ++c) {
    double sum = 0.0;
    for (int r = 0; r < rows; ++r) sum += x[At(r, c, cols)];
    out[c] = static_cast<float>(sum);
  }
}

void ArgmaxRows(int rows, int cols, absl::Span<const float> x,
                absl::Span<float> out) {
  assert(x.size() >= static_cast<size_t>(rows) * cols);
  assert(out.size() >= static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    int best = 0;
    for (int c = 1; c < cols; ++c) {
      if (x[At(r, c, cols)] > x[At(r, best, cols)]) best = c;
    }
    out[r] = static_cast<float>(best);
  }
}

namespace {

// Element (n, c, h, w) of an NCHW tensor of `channels` planes of h x w.
size_t Nchw(int n, int c, int h, int w, int channels, int height, int width) {
  return ((static_cast<size_t>(n) * channels + c) * height + h) * width + w;
}

}  // namespace

void Conv2dForward(const Conv2dShape& s, absl::Span<const float> x,
                   absl::Span<const float> weights, absl::Span<float> y) {
  const int oh = s.out_height(), ow = s.out_width();
  assert(x.size() >= s.input_size() && weights.size() >= s.weight_size());
  assert(y.size() >= s.output_size());
  for (int n = 0; n < s.batch; ++n) {
    for (int o = 0; o < s.out_channels; ++o) {
      for (int i = 0; i < oh; ++i) {
        for (int j = 0; j < ow; ++j) {
          double sum = 0.0;
          for (int c = 0; c < s.in_channels; ++c) {
            for (int u = 0; u < s.kernel_height; ++u) {
              const int h = i * s.stride_height + u - s.pad_height;
              if (h < 0 || h >= s.in_height) continue;
              for (int v = 0; v < s.kernel_width; ++v) {
                const int w = j * s.stride_width + v - s.pad_width;
                if (w < 0 || w >= s.in_width) continue;
                sum += double{x[Nchw(n, c, h, w, s.in_channels, s.in_height,
                                     s.in_width)]} *
                       weights[Nchw(o, c, u, v, s.in_channels, s.kernel_height,
                                    s.kernel_width)];
              }
            }
          }
          y[Nchw(n, o, i, j, s.out_channels, oh, ow)] = static_cast<float>(sum);
        }
      }
    }
  }
}

void Conv2dBackwardData(const Conv2dShape& s, absl::Span<const float> grad_y,
                        absl::Span<const float> weights,
                        absl::Span<float> grad_x) {
  const int oh = s.out_height(), ow = s.out_width();
  assert(grad_y.size() >= s.output_size());
  assert(weights.size() >= s.weight_size());
  assert(grad_x.size() >= s.input_size());
  for (int n = 0; n < s.batch; ++n) {
    for (int c = 0; c < s.in_channels; ++c) {
      for (int h = 0; h < s.in_height; ++h) {
        for (int w = 0; w < s.in_width; ++w) {
          // Every (output, kernel tap) pair that read x[n, c, h, w].
          double sum = 0.0;
          for (int o = 0; o < s.out_channels; ++o) {
            for (int u = 0; u < s.kernel_height; ++u) {
              const int ph = h + s.pad_height - u;
              if (ph < 0 || ph % s.stride_height != 0) continue;
              const int i = ph / s.stride_height;
              if (i >= oh) continue;
              for (int v = 0; v < s.kernel_width; ++v) {
                const int pw = w + s.pad_width - v;
                if (pw < 0 || pw % s.stride_width != 0) continue;
                const int j = pw / s.stride_width;
                if (j >= ow) continue;
                sum +=
                    double{grad_y[Nchw(n, o, i, j, s.out_channels, oh, ow)]} *
                    weights[Nchw(o, c, u, v, s.in_channels, s.kernel_height,
                                 s.kernel_width)];
              }
            }
          }
          grad_x[Nchw(n, c, h, w, s.in_channels, s.in_height, s.in_width)] =
              static_cast<float>(sum);
        }
      }
    }
  }
}

void Conv2dBackwardFilter(const Conv2dShape& s, absl::Span<const float> x,
                          absl::Span<const float> grad_y,
                          absl::Span<float> grad_weights) {
  const int oh = s.out_height(), ow = s.out_width();
  assert(x.size() >= s.input_size() && grad_y.size() >= s.output_size());
  assert(grad_weights.size() >= s.weight_size());
  for (int o = 0; o < s.out_channels; ++o) {
    for (int c = 0; c < s.in_channels; ++c) {
      for (int u = 0; u < s.kernel_height; ++u) {
        for (int v = 0; v < s.kernel_width; ++v) {
          double sum = 0.0;
          for (int n = 0; n < s.batch; ++n) {
            for (int i = 0; i < oh; ++i) {
              const int h = i * s.stride_height + u - s.pad_height;
              if (h < 0 || h >= s.in_height) continue;
              for (int j = 0; j < ow; ++j) {
                const int w = j * s.stride_width + v - s.pad_width;
                if (w < 0 || w >= s.in_width) continue;
                sum +=
                    double{grad_y[Nchw(n, o, i, j, s.out_channels, oh, ow)]} *
                    x[Nchw(n, c, h, w, s.in_channels, s.in_height, s.in_width)];
              }
            }
          }
          grad_weights[Nchw(o, c, u, v, s.in_channels, s.kernel_height,
                            s.kernel_width)] = static_cast<float>(sum);
        }
      }
    }
  }
}

void AddChannelBias(int batch, int channels, int spatial,
                    absl::Span<const float> bias, absl::Span<float> y) {
  assert(bias.size() >= static_cast<size_t>(channels));
  assert(y.size() >= static_cast<size_t>(batch) * channels * spatial);
  for (int n = 0; n < batch; ++n) {
    for (int c = 0; c < channels; ++c) {
      for (int p = 0; p < spatial; ++p) {
        y[Nchw(n, c, 0, p, channels, 1, spatial)] += bias[c];
      }
    }
  }
}

void ChannelBiasGrad(int batch, int channels, int spatial,
                     absl::Span<const float> grad_y,
                     absl::Span<float> grad_bias) {
  assert(grad_y.size() >= static_cast<size_t>(batch) * channels * spatial);
  assert(grad_bias.size() >= static_cast<size_t>(channels));
  for (int c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (int n = 0; n < batch; ++n) {
      for (int p = 0; p < spatial; ++p) {
        sum += grad_y[Nchw(n, c, 0, p, channels, 1, spatial)];
      }
    }
    grad_bias[c] = static_cast<float>(sum);
  }
}

void MaxPool2dForward(const Pool2dShape& s, absl::Span<const float> x,
                      absl::Span<float> y, absl::Span<float> argmax) {
  const int oh = s.out_height(), ow = s.out_width();
  assert(x.size() >= s.input_size());
  assert(y.size() >= s.output_size() && argmax.size() >= s.output_size());
  for (int n = 0; n < s.batch; ++n) {
    for (int c = 0; c < s.channels; ++c) {
      for (int i = 0; i < oh; ++i) {
        for (int j = 0; j < ow; ++j) {
          int best_h = i * s.stride_height, best_w = j * s.stride_width;
          float best = x[Nchw(n, c, best_h, best_w, s.channels, s.in_height,
                              s.in_width)];
          for (int u = 0; u < s.window_height; ++u) {
            for (int v = 0; v < s.window_width; ++v) {
              const int h = i * s.stride_height + u;
              const int w = j * s.stride_width + v;
              const float value =
                  x[Nchw(n, c, h, w, s.channels, s.in_height, s.in_width)];
              if (!std::isnan(best) && (std::isnan(value) || value > best)) {
                best = value;
                best_h = h;
                best_w = w;
              }
            }
          }
          const size_t out = Nchw(n, c, i, j, s.channels, oh, ow);
          y[out] = best;
          argmax[out] = static_cast<float>(best_h * s.in_width + best_w);
        }
      }
    }
  }
}

void MaxPool2dBackward(const Pool2dShape& s, absl::Span<const float> grad_y,
                       absl::Span<const float> argmax,
                       absl::Span<float> grad_x) {
  const int oh = s.out_height(), ow = s.out_width();
  const size_t plane = static_cast<size_t>(s.in_height) * s.in_width;
  assert(grad_y.size() >= s.output_size() && argmax.size() >= s.output_size());
  assert(grad_x.size() >= s.input_size());
  std::vector<double> sums(plane);
  for (int n = 0; n < s.batch; ++n) {
    for (int c = 0; c < s.channels; ++c) {
      sums.assign(plane, 0.0);
      for (int i = 0; i < oh; ++i) {
        for (int j = 0; j < ow; ++j) {
          const size_t out = Nchw(n, c, i, j, s.channels, oh, ow);
          const size_t at = static_cast<size_t>(argmax[out]);
          assert(at < plane);
          sums[at] += grad_y[out];
        }
      }
      float* dst =
          grad_x.data() + Nchw(n, c, 0, 0, s.channels, s.in_height, s.in_width);
      for (size_t e = 0; e < plane; ++e) dst[e] = static_cast<float>(sums[e]);
    }
  }
}

void AvgPool2dForward(const Pool2dShape& s, absl::Span<const float> x,
                      absl::Span<float> y) {
  const int oh = s.out_height(), ow = s.out_width();
  const double area = double{1} * s.window_height * s.window_width;
  assert(x.size() >= s.input_size() && y.size() >= s.output_size());
  for (int n = 0; n < s.batch; ++n) {
    for (int c = 0; c < s.channels; ++c) {
      for (int i = 0; i < oh; ++i) {
        for (int j = 0; j < ow; ++j) {
          double sum = 0.0;
          for (int u = 0; u < s.window_height; ++u) {
            for (int v = 0; v < s.window_width; ++v) {
              sum +=
                  x[Nchw(n, c, i * s.stride_height + u, j * s.stride_width + v,
                         s.channels, s.in_height, s.in_width)];
            }
          }
          y[Nchw(n, c, i, j, s.channels, oh, ow)] =
              static_cast<float>(sum / area);
        }
      }
    }
  }
}

void AvgPool2dBackward(const Pool2dShape& s, absl::Span<const float> grad_y,
                       absl::Span<float> grad_x) {
  const int oh = s.out_height(), ow = s.out_width();
  const double area = double{1} * s.window_height * s.window_width;
  assert(grad_y.size() >= s.output_size() && grad_x.size() >= s.input_size());
  std::vector<double> sums(s.input_size());
  for (int n = 0; n < s.batch; ++n) {
    for (int c = 0; c < s.channels; ++c) {
      for (int i = 0; i < oh; ++i) {
        for (int j = 0; j < ow; ++j) {
          const double g = grad_y[Nchw(n, c, i, j, s.channels, oh, ow)] / area;
          for (int u = 0; u < s.window_height; ++u) {
            for (int v = 0; v < s.window_width; ++v) {
              sums[Nchw(n, c, i * s.stride_height + u, j * s.stride_width + v,
                        s.channels, s.in_height, s.in_width)] += g;
            }
          }
        }
      }
    }
  }
  for (size_t e = 0; e < sums.size(); ++e) {
    grad_x[e] = static_cast<float>(sums[e]);
  }
}

void Dropout(const DropoutMask& mask, absl::Span<const float> x,
             absl::Span<float> y) {
  assert(y.size() >= x.size());
  const uint64_t key = dropout::StepKey(mask.seed, mask.step);
  const uint32_t threshold = dropout::DropThreshold(mask.rate);
  const float scale = dropout::KeepScale(mask.rate);
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = x[i] *
           (dropout::Kept(key, mask.first_index + i, threshold) ? scale : 0.0f);
  }
}

std::vector<float> RandomUniform(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> out(n);
  uint64_t state = seed;
  for (float& v : out) {
    // SplitMix64: fixed arithmetic, so values do not depend on the platform's
    // <random> distributions.
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const double unit = static_cast<double>(z >> 40) / 16777216.0;
    v = static_cast<float>(lo + (hi - lo) * unit);
  }
  return out;
}

}  // namespace ps::kernels::reference
