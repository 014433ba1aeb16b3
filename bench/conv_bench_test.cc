// A smoke run of the convolution benchmark at a tiny batch: every
// measurement completes with a positive rate. No speed is asserted.
#include "bench/conv_bench.h"

#include <memory>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kernels/cpu_backend.h"

namespace ps::bench {
namespace {

TEST(ConvBenchTest, LayersAreTheFashionMnistCnns) {
  const std::vector<ConvLayer> layers = FashionMnistCnnLayers(64);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(DescribeShape(layers[0].shape),
            "1x28x28 -> 32x28x28, 5x5 pad 2 stride 1");
  EXPECT_EQ(DescribeShape(layers[1].shape),
            "32x14x14 -> 64x14x14, 5x5 pad 2 stride 1");
  // 2 x 64 images x 64 x 14 x 14 outputs x 32 x 25 taps.
  EXPECT_EQ(ConvPassFlops(layers[1].shape), 2ull * 64 * 64 * 196 * 800);
}

TEST(ConvBenchTest, MeasuresEveryPassWithPositiveRates) {
  absl::StatusOr<std::unique_ptr<kernels::Backend>> backend =
      kernels::CreateCpuBackend();
  ASSERT_TRUE(backend.ok()) << backend.status();
  MeasureOptions options;
  options.warmup_rounds = 0;
  options.trials = 1;
  options.min_rounds = 1;
  // Many ticks of any clock, so that no rate reads 0.
  options.min_time = absl::Milliseconds(20);
  for (const ConvLayer& layer : FashionMnistCnnLayers(2)) {
    SCOPED_TRACE(layer.name);
    absl::StatusOr<ConvLayerResult> result =
        MeasureConvLayer(**backend, layer, options);
    ASSERT_TRUE(result.ok()) << result.status();
    for (const ConvFigures* f : {&result->forward, &result->backward_data,
                                 &result->backward_filter, &result->all}) {
      EXPECT_GT(f->conv.gbps(), 0);
      EXPECT_GT(f->gemm.gbps(), 0);
    }
  }
}

}  // namespace
}  // namespace ps::bench
