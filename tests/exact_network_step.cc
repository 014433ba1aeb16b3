#include "tests/exact_network_step.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "worker/nn/layer.h"
#include "worker/nn/reference_net.h"

namespace ps::testing {
namespace {

namespace nn = ::ps::worker::nn;
namespace ref = ::ps::worker::nn::testing;

// gamma of a rounding count in RoundingsOf's units.
double GammaOf(double units) {
  return units * kUnitRoundoff / (1 - units * kUnitRoundoff);
}

std::vector<double> Abs(absl::Span<const double> v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(v[i]);
  return a;
}

// |v| + e, elementwise.
std::vector<double> AbsPlus(absl::Span<const double> v,
                            absl::Span<const double> e) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::abs(v[i]) + e[i];
  return a;
}

// Calls f(o, e) for each element e of each max-pooling window o, in the
// reference's layout.
template <typename F>
void ForEachWindowElement(const nn::LayerConfig& c,
                          const nn::ActivationShape& in,
                          const nn::ActivationShape& out, int batch, F f) {
  for (int64_t p = 0; p < batch * in.channels; ++p) {
    const int64_t plane = p * in.height * in.width;
    for (int64_t i = 0; i < out.height; ++i) {
      for (int64_t j = 0; j < out.width; ++j) {
        const int64_t o = (p * out.height + i) * out.width + j;
        for (int u = 0; u < c.kernel_height; ++u) {
          for (int v = 0; v < c.kernel_width; ++v) {
            f(o, plane + (i * c.stride_height + u) * in.width +
                     j * c.stride_width + v);
          }
        }
      }
    }
  }
}

// A layer's parameters as the reference takes them, plus their absolute
// values with and without the bias (for the error terms).
struct LayerParams {
  ref::Params values, abs, abs_no_bias;
  int first_tensor = -1;  // Its weight's tensor id; -1 without parameters.
};

// Adds to `sum` the gradient of `batch`'s examples (a rank's share, passing
// `pass`), each weighted by `coefficient`, and to its bound what float32 can
// make of it, where `total` examples make the step.
void AccumulateGradient(const nn::ModelDescription& d, uint64_t seed,
                        const nn::Pass& pass,
                        const std::vector<LayerParams>& params,
                        const worker::Batch& batch, double coefficient,
                        int total, ExactStep& sum) {
  const size_t num_layers = d.layers().size();
  std::vector<nn::ActivationShape> shapes = {d.input()};
  for (const nn::ActivationShape& s : d.output_shapes()) shapes.push_back(s);
  // x[l] is layer l's input, e[l] its error bound; x.back() the logits.
  std::vector<std::vector<double>> x(num_layers + 1), e(num_layers + 1);
  std::vector<ref::Decisions> decisions(num_layers);
  std::vector<ref::Roundings> roundings;
  x[0].assign(batch.images.begin(), batch.images.end());
  e[0].assign(x[0].size(), 0.0);
  for (size_t l = 0; l < num_layers; ++l) {
    const nn::LayerConfig& c = d.layers()[l];
    const nn::ActivationShape& in = shapes[l];
    const nn::ActivationShape& out = shapes[l + 1];
    const uint64_t mask_seed = nn::DropoutSeed(seed, static_cast<int>(l));
    roundings.push_back(ref::RoundingsOf(c, in, out, total, true));
    x[l + 1] = ref::LayerForward(c, in, out, pass, mask_seed, x[l],
                                 params[l].values, &decisions[l]);
    if (c.kind == nn::LayerKind::kRelu) {
      // Errors pass unchanged, except where float32 surely gives zero too.
      e[l + 1].resize(x[l].size());
      for (size_t k = 0; k < x[l].size(); ++k) {
        e[l + 1][k] = x[l][k] > -e[l][k] ? e[l][k] : 0.0;
      }
    } else if (c.kind == nn::LayerKind::kMaxPool) {
      // Float32 takes some element of the window: no lower than the chosen
      // one's lowest, no higher than the highest element's highest.
      const std::vector<int64_t>& chosen = decisions[l];
      e[l + 1].assign(x[l + 1].size(), 0.0);
      for (size_t o = 0; o < chosen.size(); ++o) e[l + 1][o] = e[l][chosen[o]];
      ForEachWindowElement(c, in, out, pass.batch, [&](int64_t o, int64_t k) {
        e[l + 1][o] =
            std::max(e[l + 1][o], x[l][k] + e[l][k] - x[l][chosen[o]]);
      });
    } else {
      // Linear in x: gamma times the absolute terms, plus the input's
      // errors carried through the absolute weights.
      const double gamma = GammaOf(roundings[l].forward);
      const std::vector<double> terms = ref::LayerForward(
          c, in, out, pass, mask_seed, AbsPlus(x[l], e[l]), params[l].abs);
      const std::vector<double> carried = ref::LayerForward(
          c, in, out, pass, mask_seed, e[l], params[l].abs_no_bias);
      e[l + 1].resize(terms.size());
      for (size_t k = 0; k < terms.size(); ++k) {
        e[l + 1][k] = gamma * terms[k] + carried[k];
      }
    }
  }

  std::vector<double> dy, dy_bound;
  SoftmaxDelta(d.num_classes(), x.back(), e.back(), batch.labels, coefficient,
               dy, dy_bound);
  for (size_t l = num_layers; l-- > 0;) {
    const nn::LayerConfig& c = d.layers()[l];
    const nn::ActivationShape& in = shapes[l];
    const nn::ActivationShape& out = shapes[l + 1];
    const uint64_t mask_seed = nn::DropoutSeed(seed, static_cast<int>(l));
    const ref::LayerGradients g = ref::LayerBackward(
        c, in, out, pass, mask_seed, x[l], params[l].values, decisions[l], dy);
    std::vector<double> dx_bound(g.input.size(), 0.0);
    const double gamma_x = GammaOf(roundings[l].grad_x);
    if (c.kind == nn::LayerKind::kRelu) {
      for (size_t k = 0; k < dx_bound.size(); ++k) {
        if (std::abs(x[l][k]) <= e[l][k]) {
          dx_bound[k] = std::abs(dy[k]) + dy_bound[k];  // Either side.
        } else {
          dx_bound[k] = x[l][k] > 0 ? dy_bound[k] : 0.0;
        }
      }
    } else if (c.kind == nn::LayerKind::kMaxPool) {
      // Where another element may be the float32 maximum, the whole
      // gradient may go to either: each of them gets it in full.
      const std::vector<int64_t>& chosen = decisions[l];
      std::vector<int> candidates(chosen.size(), 1);
      auto may_win = [&](int64_t o, int64_t k) {
        const int64_t m = chosen[o];
        return k != m && x[l][k] + e[l][k] >= x[l][m] - e[l][m];
      };
      ForEachWindowElement(c, in, out, pass.batch, [&](int64_t o, int64_t k) {
        candidates[o] += may_win(o, k);
      });
      ForEachWindowElement(c, in, out, pass.batch, [&](int64_t o, int64_t k) {
        const double full = std::abs(dy[o]) + dy_bound[o];
        if (k == chosen[o]) {
          dx_bound[k] += (candidates[o] > 1 ? full : dy_bound[o]) +
                         gamma_x * full;  // Overlapping windows' sums.
        } else if (may_win(o, k)) {
          dx_bound[k] += (1 + gamma_x) * full;
        }
      });
    } else {
      // Linear in dy (and bilinear in x and dy for the weight gradient).
      const std::vector<double> abs_dy = Abs(dy);
      const ref::LayerGradients terms = ref::LayerBackward(
          c, in, out, pass, mask_seed, AbsPlus(x[l], e[l]), params[l].abs,
          decisions[l], AbsPlus(dy, dy_bound));
      if (l > 0) {
        const ref::LayerGradients carried =
            ref::LayerBackward(c, in, out, pass, mask_seed, x[l], params[l].abs,
                               decisions[l], dy_bound);
        for (size_t k = 0; k < dx_bound.size(); ++k) {
          dx_bound[k] = gamma_x * terms.input[k] + carried.input[k];
        }
      }
      if (params[l].first_tensor >= 0) {
        // Operand errors: the absolute terms with errors, less without.
        const ref::LayerGradients exact_terms =
            ref::LayerBackward(c, in, out, pass, mask_seed, Abs(x[l]),
                               params[l].abs, decisions[l], abs_dy);
        for (size_t p = 0; p < g.params.size(); ++p) {
          const int t = params[l].first_tensor + static_cast<int>(p);
          const double gamma_p = GammaOf(roundings[l].parameters[p]);
          for (size_t k = 0; k < g.params[p].size(); ++k) {
            sum.weights[t][k] += g.params[p][k];
            sum.bound[t][k] += gamma_p * terms.params[p][k] +
                               (terms.params[p][k] - exact_terms.params[p][k]);
          }
        }
      }
    }
    if (l == 0) break;
    dy = g.input;
    dy_bound = std::move(dx_bound);
  }
}

}  // namespace

ExactStep ExactNetworkSgdStep(const worker::nn::ModelDescription& description,
                              const NetworkStep& step,
                              const std::vector<std::vector<float>>& weights,
                              float learning_rate,
                              absl::Span<const worker::Batch> ranks,
                              Aggregation aggregation) {
  std::vector<LayerParams> params(description.layers().size());
  int next_tensor = 0;
  for (size_t l = 0; l < params.size(); ++l) {
    const nn::LayerKind kind = description.layers()[l].kind;
    if (kind != nn::LayerKind::kConv && kind != nn::LayerKind::kDense) continue;
    LayerParams& p = params[l];
    p.first_tensor = next_tensor;
    for (int i = 0; i < 2; ++i) {
      const std::vector<float>& w = weights[next_tensor++];
      p.values.emplace_back(w.begin(), w.end());
      p.abs.push_back(Abs(p.values.back()));
    }
    p.abs_no_bias = {p.abs[0], std::vector<double>(p.abs[1].size(), 0.0)};
  }
  assert(static_cast<size_t>(next_tensor) == weights.size());

  ExactStep gradient;
  for (const std::vector<float>& w : weights) {
    gradient.weights.emplace_back(w.size(), 0.0);
    gradient.bound.emplace_back(w.size(), 0.0);
  }
  int total = 0;
  for (const worker::Batch& b : ranks) total += b.size;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].size == 0) continue;
    const double coefficient = AggregationCoefficient(aggregation, ranks, r);
    if (coefficient == 0) continue;
    nn::Pass pass;
    pass.batch = static_cast<int>(ranks[r].size);
    pass.training = true;
    pass.step = step.clock;
    pass.first_example = static_cast<uint64_t>(r) * step.batch_size;
    AccumulateGradient(description, step.seed, pass, params, ranks[r],
                       coefficient, total, gradient);
  }
  return SgdUpdate(weights, learning_rate, std::move(gradient));
}

}  // namespace ps::testing
