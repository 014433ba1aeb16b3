#include "tests/exact_sgd_step.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace ps::testing {

double Gamma(int64_t k) { return k * kUnitRoundoff / (1 - k * kUnitRoundoff); }

void SoftmaxDelta(int classes, absl::Span<const double> logits,
                  absl::Span<const double> logit_bound,
                  absl::Span<const float> labels, double coefficient,
                  std::vector<double>& delta,
                  std::vector<double>& delta_bound) {
  const size_t n = labels.size();
  delta.assign(n * classes, 0.0);
  delta_bound.assign(n * classes, 0.0);
  for (size_t r = 0; r < n; ++r) {
    const double* z = &logits[r * classes];
    const double* bound = &logit_bound[r * classes];
    const double max = *std::max_element(z, z + classes);
    const double worst = *std::max_element(bound, bound + classes);
    double total = 0;
    for (int c = 0; c < classes; ++c) total += std::exp(z[c] - max);
    const int label = static_cast<int>(labels[r]);
    for (int c = 0; c < classes; ++c) {
      const double p = std::exp(z[c] - max) / total;
      const double d = p - (c == label ? 1.0 : 0.0);
      delta[r * classes + c] = coefficient * d;
      // The CPU kernel rounds each value once; allow four roundings for
      // other backends.
      delta_bound[r * classes + c] =
          coefficient *
          (p * std::expm1(2 * worst) + 4 * kUnitRoundoff * (std::abs(d) + p));
    }
  }
}

// Each example's gradient enters the step with the weight the aggregation
// gives its rank's mean, divided by the rank's example count.
double AggregationCoefficient(Aggregation aggregation,
                              absl::Span<const worker::Batch> ranks,
                              size_t rank) {
  int64_t total = 0;
  for (const worker::Batch& b : ranks) total += b.size;
  const int64_t first = ranks.front().size;
  const int64_t last = ranks.back().size;
  switch (aggregation) {
    case Aggregation::kWeightedMean:
      return 1.0 / total;
    case Aggregation::kDropLastRank:
      return rank + 1 == ranks.size() ? 0.0 : 1.0 / (total - last);
    case Aggregation::kFirstRankTwice:
      return (rank == 0 ? 2.0 : 1.0) / (total + first);
    case Aggregation::kSumOfRankMeans:
      return 1.0 / ranks[rank].size;
  }
  return 0;
}

namespace {

// Adds to `sum` the gradient of `batch`'s examples, each weighted by
// `coefficient`, and to its bound what float32 can make of it, where
// `batch_gamma` bounds the relative rounding of sums over examples.
void AccumulateGradient(absl::Span<const int> layer_sizes,
                        const std::vector<std::vector<float>>& weights,
                        const worker::Batch& batch, double coefficient,
                        double batch_gamma, ExactStep& sum) {
  const int64_t n = batch.size;
  const int num_layers = static_cast<int>(layer_sizes.size()) - 1;
  // inputs[l] is layer l's input (n x in), z[l] its output before the ReLU
  // (n x out); the *_bound vectors hold their error bounds.
  std::vector<std::vector<double>> inputs(num_layers), input_bound(num_layers);
  std::vector<std::vector<double>> z(num_layers), z_bound(num_layers);
  inputs[0].assign(batch.images.begin(), batch.images.end());
  input_bound[0].assign(inputs[0].size(), 0.0);
  for (int l = 0; l < num_layers; ++l) {
    const int in = layer_sizes[l];
    const int out = layer_sizes[l + 1];
    const std::vector<float>& w = weights[2 * l];
    const std::vector<float>& bias = weights[2 * l + 1];
    const double gamma = Gamma(in + 1);
    z[l].assign(n * out, 0.0);
    z_bound[l].assign(n * out, 0.0);
    for (int64_t r = 0; r < n; ++r) {
      double* zr = &z[l][r * out];
      double* er = &z_bound[l][r * out];
      for (int i = 0; i < in; ++i) {
        const double a = inputs[l][r * in + i];
        const double ea = input_bound[l][r * in + i];
        if (a == 0 && ea == 0) continue;
        const float* wi = &w[static_cast<size_t>(i) * out];
        for (int j = 0; j < out; ++j) {
          zr[j] += a * wi[j];
          er[j] += (1 + gamma) * (std::abs(a) + ea) * std::abs(wi[j]) -
                   std::abs(a * wi[j]);
        }
      }
      for (int j = 0; j < out; ++j) {
        zr[j] += bias[j];
        er[j] += gamma * std::abs(bias[j]);
      }
    }
    if (l + 1 == num_layers) break;
    inputs[l + 1].resize(n * out);
    input_bound[l + 1].resize(n * out);
    for (int64_t k = 0; k < n * out; ++k) {
      inputs[l + 1][k] = std::max(z[l][k], 0.0);
      // A ReLU passes errors on unchanged, except where float32 surely gives
      // zero too.
      input_bound[l + 1][k] = z[l][k] > -z_bound[l][k] ? z_bound[l][k] : 0.0;
    }
  }

  // delta: d(loss)/d(pre-activation) of the last layer, times the example's
  // coefficient.
  std::vector<double> delta, delta_bound;
  SoftmaxDelta(layer_sizes.back(), z[num_layers - 1], z_bound[num_layers - 1],
               batch.labels, coefficient, delta, delta_bound);

  for (int l = num_layers - 1; l >= 0; --l) {
    const int in = layer_sizes[l];
    const int out = layer_sizes[l + 1];
    std::vector<double>& dw = sum.weights[2 * l];
    std::vector<double>& dw_bound = sum.bound[2 * l];
    std::vector<double>& db = sum.weights[2 * l + 1];
    std::vector<double>& db_bound = sum.bound[2 * l + 1];
    for (int64_t r = 0; r < n; ++r) {
      const double* dr = &delta[r * out];
      const double* er = &delta_bound[r * out];
      for (int j = 0; j < out; ++j) {
        db[j] += dr[j];
        db_bound[j] +=
            (1 + batch_gamma) * (std::abs(dr[j]) + er[j]) - std::abs(dr[j]);
      }
      for (int i = 0; i < in; ++i) {
        const double a = inputs[l][r * in + i];
        const double ea = input_bound[l][r * in + i];
        if (a == 0 && ea == 0) continue;
        double* dwi = &dw[static_cast<size_t>(i) * out];
        double* ei = &dw_bound[static_cast<size_t>(i) * out];
        for (int j = 0; j < out; ++j) {
          dwi[j] += a * dr[j];
          ei[j] += (1 + batch_gamma) * (std::abs(a) + ea) *
                       (std::abs(dr[j]) + er[j]) -
                   std::abs(a * dr[j]);
        }
      }
    }
    if (l == 0) break;

    // Back through W^T, then the ReLU of layer l - 1.
    const std::vector<float>& w = weights[2 * l];
    const double gamma = Gamma(out);
    std::vector<double> next(n * in), next_bound(n * in);
    for (int64_t r = 0; r < n; ++r) {
      const double* dr = &delta[r * out];
      const double* er = &delta_bound[r * out];
      for (int i = 0; i < in; ++i) {
        const float* wi = &w[static_cast<size_t>(i) * out];
        double g = 0, eg = 0;
        for (int j = 0; j < out; ++j) {
          g += dr[j] * wi[j];
          eg += (1 + gamma) * (std::abs(dr[j]) + er[j]) * std::abs(wi[j]) -
                std::abs(dr[j] * wi[j]);
        }
        const size_t k = r * in + i;
        const double pre = z[l - 1][k];
        next[k] = pre > 0 ? g : 0.0;
        if (std::abs(pre) <= z_bound[l - 1][k]) {
          next_bound[k] = std::abs(g) + eg;  // Either side of the kink.
        } else {
          next_bound[k] = pre > 0 ? eg : 0.0;
        }
      }
    }
    delta = std::move(next);
    delta_bound = std::move(next_bound);
  }
}

}  // namespace

ExactStep ExactSgdStep(absl::Span<const int> layer_sizes,
                       const std::vector<std::vector<float>>& weights,
                       float learning_rate,
                       absl::Span<const worker::Batch> ranks,
                       Aggregation aggregation) {
  assert(weights.size() == 2 * (layer_sizes.size() - 1));
  ExactStep gradient;
  for (const std::vector<float>& w : weights) {
    gradient.weights.emplace_back(w.size(), 0.0);
    gradient.bound.emplace_back(w.size(), 0.0);
  }
  int64_t total = 0;
  for (const worker::Batch& b : ranks) total += b.size;
  // A rank's float32 sums over its examples run over at most `total` terms;
  // the servers' weighted sum of the ranks' gradients rounds once more.
  const double batch_gamma = Gamma(total + 2);
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].size == 0) continue;
    const double coefficient = AggregationCoefficient(aggregation, ranks, r);
    if (coefficient == 0) continue;
    AccumulateGradient(layer_sizes, weights, ranks[r], coefficient, batch_gamma,
                       gradient);
  }

  return SgdUpdate(weights, learning_rate, std::move(gradient));
}

ExactStep SgdUpdate(const std::vector<std::vector<float>>& weights,
                    float learning_rate, ExactStep gradient) {
  // w -= lr g rounds twice at most; the weights before it are exact.
  ExactStep step = std::move(gradient);
  const double lr = learning_rate;
  for (size_t t = 0; t < weights.size(); ++t) {
    for (size_t i = 0; i < weights[t].size(); ++i) {
      const double w = weights[t][i];
      const double change = lr * step.weights[t][i];
      const double change_bound = lr * step.bound[t][i];
      step.weights[t][i] = w - change;
      step.bound[t][i] = change_bound + 2 * kUnitRoundoff *
                                            (std::abs(w) + std::abs(change) +
                                             2 * change_bound);
    }
  }
  return step;
}

}  // namespace ps::testing
