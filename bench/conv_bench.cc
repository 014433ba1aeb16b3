#include "bench/conv_bench.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace ps::bench {
namespace {

using kernels::Backend;
using kernels::Conv2dShape;
using kernels::DeviceBuffer;

Conv2dShape Conv5x5Pad2(int batch, int in_channels, int size,
                        int out_channels) {
  Conv2dShape s;
  s.batch = batch;
  s.in_channels = in_channels;
  s.in_height = s.in_width = size;
  s.out_channels = out_channels;
  s.kernel_height = s.kernel_width = 5;
  s.pad_height = s.pad_width = 2;
  return s;
}

// A buffer of `n` values in [-1, 1) from a fixed sequence: any values do for
// timing, but not denormals or NaNs, which some CPUs compute slowly.
absl::StatusOr<std::unique_ptr<DeviceBuffer>> Filled(Backend& backend,
                                                     uint64_t n) {
  std::vector<float> values(n);
  uint32_t state = 12345;
  for (float& v : values) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
  }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> buffer = backend.Allocate(n);
  if (!buffer.ok()) return buffer.status();
  if (absl::Status s = backend.CopyToDevice(values.data(), n, **buffer, 0);
      !s.ok()) {
    return s;
  }
  return buffer;
}

// Each round ends with Synchronize, so that a device backend is timed for
// the work, not for enqueueing it.
absl::StatusOr<Measurement> Measure(Backend& backend,
                                    const MeasureOptions& options,
                                    uint64_t flops,
                                    absl::FunctionRef<absl::Status()> pass) {
  return MeasureRounds(options, flops, [&]() -> absl::Status {
    if (absl::Status s = pass(); !s.ok()) return s;
    return backend.Synchronize();
  });
}

Measurement Median(std::vector<Measurement> trials) {
  std::sort(trials.begin(), trials.end(),
            [](const Measurement& a, const Measurement& b) {
              return a.gbps() < b.gbps();
            });
  return trials[trials.size() / 2];
}

// options.trials pairs of single trials, conv then GEMM, after the warm-up
// rounds of both.
absl::StatusOr<ConvFigures> MeasurePair(
    Backend& backend, const MeasureOptions& options, uint64_t flops,
    absl::FunctionRef<absl::Status()> conv,
    absl::FunctionRef<absl::Status()> gemm) {
  MeasureOptions warmup = options;
  warmup.trials = 1;
  warmup.min_rounds = 1;
  warmup.min_time = absl::ZeroDuration();
  MeasureOptions one_trial = options;
  one_trial.warmup_rounds = 0;
  one_trial.trials = 1;
  std::vector<Measurement> convs, gemms;
  std::vector<double> ratios;
  for (int i = -1; i < options.trials; ++i) {
    const MeasureOptions& o = i < 0 ? warmup : one_trial;
    absl::StatusOr<Measurement> c = Measure(backend, o, flops, conv);
    if (!c.ok()) return c.status();
    absl::StatusOr<Measurement> g = Measure(backend, o, flops, gemm);
    if (!g.ok()) return g.status();
    if (i < 0) continue;
    convs.push_back(*c);
    gemms.push_back(*g);
    ratios.push_back(g->gbps() > 0 ? c->gbps() / g->gbps() : 0.0);
  }
  std::sort(ratios.begin(), ratios.end());
  return ConvFigures{Median(std::move(convs)), Median(std::move(gemms)),
                     ratios[ratios.size() / 2]};
}

}  // namespace

std::vector<ConvLayer> FashionMnistCnnLayers(int batch) {
  return {{"conv1", Conv5x5Pad2(batch, 1, 28, 32)},
          {"conv2", Conv5x5Pad2(batch, 32, 14, 64)}};
}

uint64_t ConvPassFlops(const Conv2dShape& s) {
  return uint64_t{2} * s.output_size() * s.in_channels * s.kernel_height *
         s.kernel_width;
}

std::string DescribeShape(const Conv2dShape& s) {
  return absl::StrFormat("%dx%dx%d -> %dx%dx%d, %dx%d pad %d stride %d",
                         s.in_channels, s.in_height, s.in_width, s.out_channels,
                         s.out_height(), s.out_width(), s.kernel_height,
                         s.kernel_width, s.pad_height, s.stride_height);
}

absl::StatusOr<ConvLayerResult> MeasureConvLayer(
    Backend& backend, const ConvLayer& layer, const MeasureOptions& options) {
  const Conv2dShape& s = layer.shape;
  // The GEMM view: W [out_channels x rows] times columns [rows x cols].
  const int rows = s.in_channels * s.kernel_height * s.kernel_width;
  const int cols = s.batch * s.out_height() * s.out_width();
  const int out = s.out_channels;
  const uint64_t gemm_operand = uint64_t{1} * rows * cols;
  const uint64_t gemm_output = uint64_t{1} * out * cols;

  std::unique_ptr<DeviceBuffer> x, w, y, grad_y, grad_x, grad_w, columns,
      product;
  for (auto [buffer, n] :
       {std::pair{&x, s.input_size()}, std::pair{&w, s.weight_size()},
        std::pair{&y, s.output_size()}, std::pair{&grad_y, s.output_size()},
        std::pair{&grad_x, s.input_size()}, std::pair{&grad_w, s.weight_size()},
        std::pair{&columns, gemm_operand}, std::pair{&product, gemm_output}}) {
    absl::StatusOr<std::unique_ptr<DeviceBuffer>> filled = Filled(backend, n);
    if (!filled.ok()) return filled.status();
    *buffer = *std::move(filled);
  }

  auto forward = [&] { return backend.Conv2dForward(s, *x, *w, *y); };
  auto backward_data = [&] {
    return backend.Conv2dBackwardData(s, *grad_y, *w, *grad_x);
  };
  auto backward_filter = [&] {
    return backend.Conv2dBackwardFilter(s, *x, *grad_y, *grad_w);
  };
  // The same products as single GEMMs: y = W * columns; columns = W^T * dy;
  // dW = dy * columns^T.
  auto gemm_forward = [&] {
    return backend.Gemm(false, false, out, cols, rows, 1.0f, *w, *columns, 0.0f,
                        *product);
  };
  auto gemm_data = [&] {
    return backend.Gemm(true, false, rows, cols, out, 1.0f, *w, *product, 0.0f,
                        *columns);
  };
  auto gemm_filter = [&] {
    return backend.Gemm(false, true, out, rows, cols, 1.0f, *product, *columns,
                        0.0f, *grad_w);
  };

  const uint64_t flops = ConvPassFlops(s);
  ConvLayerResult result{layer, {}, {}, {}, {}};
  struct Pass {
    ConvFigures* figures;
    uint64_t flops;
    std::function<absl::Status()> conv;
    std::function<absl::Status()> gemm;
  };
  const Pass passes[] = {
      {&result.forward, flops, forward, gemm_forward},
      {&result.backward_data, flops, backward_data, gemm_data},
      {&result.backward_filter, flops, backward_filter, gemm_filter},
      {&result.all, 3 * flops,
       [&]() -> absl::Status {
         if (absl::Status st = forward(); !st.ok()) return st;
         if (absl::Status st = backward_data(); !st.ok()) return st;
         return backward_filter();
       },
       [&]() -> absl::Status {
         if (absl::Status st = gemm_forward(); !st.ok()) return st;
         if (absl::Status st = gemm_data(); !st.ok()) return st;
         return gemm_filter();
       }},
  };
  if (absl::Status s = ValidateMeasureOptions(options); !s.ok()) return s;
  for (const Pass& pass : passes) {
    absl::StatusOr<ConvFigures> figures =
        MeasurePair(backend, options, pass.flops, pass.conv, pass.gemm);
    if (!figures.ok()) return figures.status();
    *pass.figures = *figures;
  }
  return result;
}

}  // namespace ps::bench
