#include "worker/nn/reference_net.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/dropout_mask.h"
#include "kernels/reference_ops.h"

namespace ps::worker::nn::testing {
namespace {

std::vector<double> Conv(const LayerConfig& c, const ActivationShape& in,
                         const ActivationShape& out, int batch,
                         absl::Span<const double> x, const Params& params) {
  const std::vector<double>& w = params[0];
  const std::vector<double>& b = params[1];
  std::vector<double> y(batch * out.size());
  for (int n = 0; n < batch; ++n) {
    for (int64_t o = 0; o < out.channels; ++o) {
      for (int64_t i = 0; i < out.height; ++i) {
        for (int64_t j = 0; j < out.width; ++j) {
          double sum = 0;
          for (int64_t ch = 0; ch < in.channels; ++ch) {
            for (int u = 0; u < c.kernel_height; ++u) {
              for (int v = 0; v < c.kernel_width; ++v) {
                const int64_t r = i * c.stride_height + u - c.pad_height;
                const int64_t q = j * c.stride_width + v - c.pad_width;
                if (r < 0 || r >= in.height || q < 0 || q >= in.width) {
                  continue;
                }
                sum +=
                    x[((n * in.channels + ch) * in.height + r) * in.width + q] *
                    w[((o * in.channels + ch) * c.kernel_height + u) *
                          c.kernel_width +
                      v];
              }
            }
          }
          y[((n * out.channels + o) * out.height + i) * out.width + j] =
              sum + b[o];
        }
      }
    }
  }
  return y;
}

std::vector<double> Pool(const LayerConfig& c, const ActivationShape& in,
                         const ActivationShape& out, int batch,
                         absl::Span<const double> x, Decisions* record,
                         const Decisions* replay) {
  const bool max = c.kind == LayerKind::kMaxPool;
  std::vector<double> y(batch * out.size());
  for (int64_t p = 0; p < batch * in.channels; ++p) {
    const int64_t plane = p * in.height * in.width;
    for (int64_t i = 0; i < out.height; ++i) {
      for (int64_t j = 0; j < out.width; ++j) {
        const int64_t o = (p * out.height + i) * out.width + j;
        double acc = max ? -INFINITY : 0.0;
        int64_t argmax = -1;
        for (int u = 0; u < c.kernel_height; ++u) {
          for (int v = 0; v < c.kernel_width; ++v) {
            const int64_t e = plane + (i * c.stride_height + u) * in.width +
                              j * c.stride_width + v;
            if (!max) {
              acc += x[e];
            } else if (x[e] > acc) {
              acc = x[e];
              argmax = e;
            }
          }
        }
        if (!max) acc /= c.kernel_height * c.kernel_width;
        if (max && record != nullptr) record->push_back(argmax);
        if (max && replay != nullptr) acc = x[(*replay)[o]];
        y[o] = acc;
      }
    }
  }
  return y;
}

std::vector<double> Dense(const ActivationShape& in, const ActivationShape& out,
                          int batch, absl::Span<const double> x,
                          const Params& params) {
  const int64_t n_in = in.size(), n_out = out.size();
  std::vector<double> y(batch * n_out);
  for (int n = 0; n < batch; ++n) {
    for (int64_t j = 0; j < n_out; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        sum += x[n * n_in + i] * params[0][i * n_out + j];
      }
      y[n * n_out + j] = sum + params[1][j];
    }
  }
  return y;
}

void ConvBackward(const LayerConfig& c, const ActivationShape& in,
                  const ActivationShape& out, int batch,
                  absl::Span<const double> x, const Params& params,
                  absl::Span<const double> dy, LayerGradients& g) {
  const std::vector<double>& w = params[0];
  g.params = {std::vector<double>(w.size()), std::vector<double>(out.channels)};
  std::vector<double>& dw = g.params[0];
  for (int n = 0; n < batch; ++n) {
    for (int64_t o = 0; o < out.channels; ++o) {
      for (int64_t i = 0; i < out.height; ++i) {
        for (int64_t j = 0; j < out.width; ++j) {
          const double d =
              dy[((n * out.channels + o) * out.height + i) * out.width + j];
          g.params[1][o] += d;
          for (int64_t ch = 0; ch < in.channels; ++ch) {
            for (int u = 0; u < c.kernel_height; ++u) {
              for (int v = 0; v < c.kernel_width; ++v) {
                const int64_t r = i * c.stride_height + u - c.pad_height;
                const int64_t q = j * c.stride_width + v - c.pad_width;
                if (r < 0 || r >= in.height || q < 0 || q >= in.width) {
                  continue;
                }
                const int64_t xe =
                    ((n * in.channels + ch) * in.height + r) * in.width + q;
                const int64_t we =
                    ((o * in.channels + ch) * c.kernel_height + u) *
                        c.kernel_width +
                    v;
                g.input[xe] += d * w[we];
                dw[we] += x[xe] * d;
              }
            }
          }
        }
      }
    }
  }
}

void DenseBackward(const ActivationShape& in, const ActivationShape& out,
                   int batch, absl::Span<const double> x, const Params& params,
                   absl::Span<const double> dy, LayerGradients& g) {
  const int64_t n_in = in.size(), n_out = out.size();
  g.params = {std::vector<double>(n_in * n_out), std::vector<double>(n_out)};
  for (int n = 0; n < batch; ++n) {
    for (int64_t i = 0; i < n_in; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < n_out; ++j) {
        const double d = dy[n * n_out + j];
        sum += d * params[0][i * n_out + j];
        g.params[0][i * n_out + j] += x[n * n_in + i] * d;
      }
      g.input[n * n_in + i] = sum;
    }
    for (int64_t j = 0; j < n_out; ++j) g.params[1][j] += dy[n * n_out + j];
  }
}

// Each output's gradient back to its window: in full to the element max
// pooling chose, in equal shares for average pooling.
void PoolBackward(const LayerConfig& c, const ActivationShape& in,
                  const ActivationShape& out, int batch,
                  const Decisions& decisions, absl::Span<const double> dy,
                  LayerGradients& g) {
  const int64_t area = int64_t{c.kernel_height} * c.kernel_width;
  for (int64_t p = 0; p < batch * in.channels; ++p) {
    const int64_t plane = p * in.height * in.width;
    for (int64_t i = 0; i < out.height; ++i) {
      for (int64_t j = 0; j < out.width; ++j) {
        const int64_t o = (p * out.height + i) * out.width + j;
        if (c.kind == LayerKind::kMaxPool) {
          g.input[decisions[o]] += dy[o];
          continue;
        }
        for (int u = 0; u < c.kernel_height; ++u) {
          for (int v = 0; v < c.kernel_width; ++v) {
            g.input[plane + (i * c.stride_height + u) * in.width +
                    j * c.stride_width + v] += dy[o] / area;
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<double> LayerForward(const LayerConfig& config,
                                 const ActivationShape& in,
                                 const ActivationShape& out, const Pass& pass,
                                 uint64_t dropout_seed,
                                 absl::Span<const double> x,
                                 const Params& params, Decisions* record,
                                 const Decisions* replay) {
  if (record != nullptr) record->clear();
  assert(x.size() == static_cast<size_t>(pass.batch * in.size()));
  switch (config.kind) {
    case LayerKind::kConv:
      return Conv(config, in, out, pass.batch, x, params);
    case LayerKind::kDense:
      return Dense(in, out, pass.batch, x, params);
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
      return Pool(config, in, out, pass.batch, x, record, replay);
    case LayerKind::kRelu: {
      std::vector<double> y(x.begin(), x.end());
      for (size_t i = 0; i < y.size(); ++i) {
        const bool positive = y[i] > 0;
        if (record != nullptr) record->push_back(positive);
        if (!(replay != nullptr ? (*replay)[i] != 0 : positive)) y[i] = 0;
      }
      return y;
    }
    case LayerKind::kFlatten:
      return std::vector<double>(x.begin(), x.end());
    case LayerKind::kDropout: {
      std::vector<double> y(x.begin(), x.end());
      if (!pass.training) return y;
      namespace dropout = kernels::dropout;
      const uint64_t key = dropout::StepKey(dropout_seed, pass.step);
      const uint32_t threshold = dropout::DropThreshold(config.rate);
      const double scale = dropout::KeepScale(config.rate);
      const uint64_t first = pass.first_example * in.size();
      for (size_t i = 0; i < y.size(); ++i) {
        y[i] *= dropout::Kept(key, first + i, threshold) ? scale : 0.0;
      }
      return y;
    }
  }
  return {};
}

LayerGradients LayerBackward(const LayerConfig& config,
                             const ActivationShape& in,
                             const ActivationShape& out, const Pass& pass,
                             uint64_t dropout_seed, absl::Span<const double> x,
                             const Params& params, const Decisions& decisions,
                             absl::Span<const double> dy) {
  assert(dy.size() == static_cast<size_t>(pass.batch * out.size()));
  LayerGradients g;
  g.input.assign(pass.batch * in.size(), 0.0);
  switch (config.kind) {
    case LayerKind::kConv:
      ConvBackward(config, in, out, pass.batch, x, params, dy, g);
      break;
    case LayerKind::kDense:
      DenseBackward(in, out, pass.batch, x, params, dy, g);
      break;
    case LayerKind::kMaxPool:
    case LayerKind::kAvgPool:
      PoolBackward(config, in, out, pass.batch, decisions, dy, g);
      break;
    case LayerKind::kRelu:
      for (size_t i = 0; i < dy.size(); ++i) {
        g.input[i] = decisions[i] != 0 ? dy[i] : 0.0;
      }
      break;
    case LayerKind::kFlatten:
      g.input.assign(dy.begin(), dy.end());
      break;
    case LayerKind::kDropout: {
      // Dropout is linear: its forward pass on dy is its backward pass.
      g.input = LayerForward(config, in, out, pass, dropout_seed, dy, params);
      break;
    }
  }
  return g;
}

double SoftmaxCrossEntropy(int batch, int classes,
                           absl::Span<const double> logits,
                           absl::Span<const float> labels) {
  double total = 0;
  for (int r = 0; r < batch; ++r) {
    const double* z = logits.data() + r * classes;
    const double max = *std::max_element(z, z + classes);
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] - max);
    total += max + std::log(sum) - z[static_cast<int>(labels[r])];
  }
  return total / batch;
}

Trace NetworkForward(const ModelDescription& description, uint64_t seed,
                     const Pass& pass, const Params& params,
                     absl::Span<const double> images,
                     const std::vector<Decisions>* replay) {
  Trace trace;
  trace.inputs.emplace_back(images.begin(), images.end());
  ActivationShape in = description.input();
  size_t next_tensor = 0;
  for (size_t l = 0; l < description.layers().size(); ++l) {
    const LayerConfig& config = description.layers()[l];
    Params layer_params;
    if (config.kind == LayerKind::kConv || config.kind == LayerKind::kDense) {
      layer_params = {params[next_tensor], params[next_tensor + 1]};
      next_tensor += 2;
    }
    const ActivationShape& out = description.output_shapes()[l];
    trace.decisions.emplace_back();
    trace.inputs.push_back(LayerForward(
        config, in, out, pass, DropoutSeed(seed, static_cast<int>(l)),
        trace.inputs.back(), layer_params, &trace.decisions.back(),
        replay != nullptr ? &(*replay)[l] : nullptr));
    in = out;
  }
  return trace;
}

double NetworkLoss(const ModelDescription& description, uint64_t seed,
                   const Pass& pass, const Params& params,
                   absl::Span<const double> images,
                   absl::Span<const float> labels) {
  const Trace trace = NetworkForward(description, seed, pass, params, images);
  return SoftmaxCrossEntropy(pass.batch, description.num_classes(),
                             trace.inputs.back(), labels);
}

Roundings RoundingsOf(const LayerConfig& c, const ActivationShape& in,
                      const ActivationShape& out, int batch, bool training) {
  Roundings r;
  // Windows holding one input element, at most.
  const double overlap =
      std::ceil(static_cast<double>(c.kernel_height) / c.stride_height) *
      std::ceil(static_cast<double>(c.kernel_width) / c.stride_width);
  switch (c.kind) {
    case LayerKind::kConv: {
      const int64_t area = int64_t{c.kernel_height} * c.kernel_width;
      const double per_weight =
          static_cast<double>(batch) * out.height * out.width;
      r.fan_in = in.channels * area + 1;
      r.forward = r.fan_in + 3;  // The products, then the bias.
      r.grad_x = c.units * area + 3;
      r.parameters = {per_weight + 3, per_weight + 3};
      break;
    }
    case LayerKind::kDense:
      r.fan_in = in.size() + 1;
      r.forward = r.fan_in + 3;
      r.grad_x = c.units + 3;
      r.parameters = {batch + 3.0, batch + 3.0};
      break;
    case LayerKind::kMaxPool:
      r.fan_in = int64_t{c.kernel_height} * c.kernel_width;
      r.forward = 0;  // A copy.
      r.grad_x = overlap + 3;
      break;
    case LayerKind::kAvgPool:
      r.fan_in = int64_t{c.kernel_height} * c.kernel_width + 1;
      r.forward = r.fan_in + 3;  // The sum, then the division.
      r.grad_x = overlap + 4;    // Each term divided, then summed.
      break;
    case LayerKind::kRelu:
    case LayerKind::kFlatten:
      break;  // Copies and selections.
    case LayerKind::kDropout:
      r.forward = r.grad_x = training ? 1 : 0;  // One product by the scale.
      break;
  }
  return r;
}

std::vector<double> Uniform(size_t n, uint64_t seed, double lo, double hi) {
  const std::vector<float> f = kernels::reference::RandomUniform(
      n, seed, static_cast<float>(lo), static_cast<float>(hi));
  return std::vector<double>(f.begin(), f.end());
}

}  // namespace ps::worker::nn::testing
