#include "update/gradient_mean.h"

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"

namespace ps::update {
namespace {

// `values` encoded as a push carries them; `bytes` holds the encoding.
EncodedFloats Encode(const std::vector<float>& values,
                     std::vector<char>& bytes) {
  bytes.resize(values.size() * sizeof(float));
  return EncodeInto(values, absl::MakeSpan(bytes));
}

TEST(GradientMeanTest, AddsEachElementTimesItsWeightInDouble) {
  std::vector<char> bytes;
  const EncodedFloats g = Encode({1.0f, 0.1f, -3.0f}, bytes);
  // 1e8 + 1 is exact in double, not in float.
  std::vector<double> sum = {1e8, 0.0, 5.0, 42.0};
  AddWeighted(g, 3.0, sum.data());
  EXPECT_EQ(sum[0], 1e8 + 3.0);
  EXPECT_EQ(sum[1], 3.0 * static_cast<double>(0.1f));
  EXPECT_EQ(sum[2], 5.0 - 9.0);
  EXPECT_EQ(sum[3], 42.0) << "past the gradient's end";
}

TEST(GradientMeanTest, DividesOnceThenRoundsToFloat) {
  const std::vector<double> sum = {1.0, 2.0, -7.0};
  std::vector<float> out(4, 9.0f);
  DivideToFloats(sum.data(), sum.size(), 3.0, out.data());
  EXPECT_EQ(out[0], static_cast<float>(1.0 / 3.0));
  EXPECT_EQ(out[1], static_cast<float>(2.0 / 3.0));
  EXPECT_EQ(out[2], static_cast<float>(-7.0 / 3.0));
  EXPECT_EQ(out[3], 9.0f) << "past n";
}

TEST(GradientMeanTest, TheMeanOfTwoPushesWeighsThemByTheirExamples) {
  std::vector<char> a_bytes, b_bytes;
  const EncodedFloats a = Encode({1.0f, 2.0f}, a_bytes);
  const EncodedFloats b = Encode({4.0f, -2.0f}, b_bytes);
  std::vector<double> sum(2, 0.0);
  AddWeighted(a, 3.0, sum.data());  // 3 examples.
  AddWeighted(b, 1.0, sum.data());  // 1 example.
  std::vector<float> mean(2);
  DivideToFloats(sum.data(), sum.size(), 4.0, mean.data());
  EXPECT_EQ(mean[0], (3.0f * 1.0f + 4.0f) / 4.0f);
  EXPECT_EQ(mean[1], (3.0f * 2.0f - 2.0f) / 4.0f);
}

}  // namespace
}  // namespace ps::update
