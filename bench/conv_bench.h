#ifndef PS_BENCH_CONV_BENCH_H_
#define PS_BENCH_CONV_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/measure.h"
#include "kernels/backend.h"

// The convolution benchmark: for each convolution layer of a CNN, the FLOP
// rate of the backend's Conv2d passes next to that of the GEMMs they reduce
// to, run by the same backend as three single Gemm calls on operands already
// laid out (no im2col, no per-image split): how close im2col + GEMM comes to
// the GEMM alone. Speed is reported, never asserted (see bench/README.md).
namespace ps::bench {

struct ConvLayer {
  std::string name;
  kernels::Conv2dShape shape;
};

// The convolutions of the two-convolution Fashion-MNIST CNN at `batch`:
// 1x28x28 -> conv 5x5, 32 channels, pad 2 -> max pool 2 -> conv 5x5, 64
// channels, pad 2 (-> max pool 2).
std::vector<ConvLayer> FashionMnistCnnLayers(int batch);

// Multiply-adds x 2 of one pass (forward, data or filter gradient): each is
// a product of [out_channels, in_channels * kernel area] and [in_channels *
// kernel area, batch * out area] in some arrangement.
uint64_t ConvPassFlops(const kernels::Conv2dShape& shape);

// One pass, or all three: the convolution's and the GEMM baseline's median
// trials, and the median over trials of their ratio. Measurement counts
// FLOPs as its work units, so gbps() reads GFLOP/s and 1 / cpu_ns_per_byte()
// GFLOP per CPU-second.
struct ConvFigures {
  Measurement conv;
  Measurement gemm;
  double ratio = 0;  // conv GFLOP/s / sgemm GFLOP/s.
};

struct ConvLayerResult {
  ConvLayer layer;
  ConvFigures forward;
  ConvFigures backward_data;
  ConvFigures backward_filter;
  ConvFigures all;  // The three passes a round, as a training step runs them.
};

// Measures `layer` on `backend` (whose Gemm is the baseline) with
// `options`, trials of the convolution and of its GEMMs taking turns, so
// that each pair sees the same load from whatever else runs on the machine:
// the ratio is the median of the pairs'. Fails with the backend's error.
absl::StatusOr<ConvLayerResult> MeasureConvLayer(kernels::Backend& backend,
                                                 const ConvLayer& layer,
                                                 const MeasureOptions& options);

// "1x28x28 -> 32x28x28, 5x5 pad 2 stride 1".
std::string DescribeShape(const kernels::Conv2dShape& shape);

}  // namespace ps::bench

#endif  // PS_BENCH_CONV_BENCH_H_
