#include "kernels/reference_ops.h"

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

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
