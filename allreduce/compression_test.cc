#include "allreduce/compression.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ps::allreduce {
namespace {

// The value of binary16 bits by the format's definition, in double.
double HalfValue(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1f;
  const int significand = h & 0x3ff;
  if (exponent == 0x1f) {
    return significand ? std::numeric_limits<double>::quiet_NaN()
                       : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(significand, -24);
  return sign * std::ldexp(1024 + significand, exponent - 25);
}

TEST(CompressionTest, ParsesItsNames) {
  EXPECT_EQ(*ParseCompression("none"), Compression::kNone);
  EXPECT_EQ(*ParseCompression("fp16"), Compression::kFp16);
  EXPECT_EQ(CompressionName(Compression::kFp16), "fp16");
  EXPECT_TRUE(absl::IsInvalidArgument(ParseCompression("bf16").status()));
}

TEST(CompressionTest, EveryHalfWidensExactlyAndRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const double expected = HalfValue(half);
    const float widened = HalfToFloat(half);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(widened)) << h;
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(widened)))) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(widened), expected) << h;
    ASSERT_EQ(FloatToHalf(widened), half) << h;
  }
}

// Each float to the nearer of the two halves around it, ties to the even
// significand, checked against the definition in double (exact: a float and
// a half differ by far fewer than 53 bits).
TEST(CompressionTest, RoundsToNearestEven) {
  std::mt19937 random(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0x477fffffu);  // < 65536.
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = bits(random);
    if (i % 2) b |= 0x80000000u;
    float value;
    std::memcpy(&value, &b, sizeof(value));
    const uint16_t h = FloatToHalf(value);
    const double v = value;
    const double got = HalfValue(h);
    // The neighbour on the other side of v.
    const uint16_t magnitude = h & 0x7fff;
    const bool beyond = std::fabs(got) > std::fabs(v);
    if (magnitude == 0x7c00) {
      // Infinity: only from beyond the midpoint of 65504 and 65536.
      ASSERT_GE(std::fabs(v), 65520.0) << v;
      continue;
    }
    const uint16_t other_magnitude =
        beyond ? (magnitude == 0 ? 0 : magnitude - 1) : magnitude + 1;
    const double other = std::copysign(HalfValue(other_magnitude), v);
    const double error = std::fabs(got - v);
    const double other_error = std::fabs(other - v);
    ASSERT_LE(error, other_error) << v;
    if (error == other_error && error > 0) {
      ASSERT_EQ(h & 1, 0) << "tie not to even: " << v;
    }
  }
}

TEST(CompressionTest, TiesGoToEvenAtEveryRange) {
  // 1 + 2^-11 lies between 1 and 1 + 2^-10: to 1 (even).
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3 * 2^-11 between 1 + 2^-10 (odd) and 1 + 2^-9: up.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
  // Subnormal: 2^-25 is halfway from 0 to 2^-24: to 0; 3 * 2^-25 to 2 * 2^-24.
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(FloatToHalf(-0x1p-26f), 0x8000);
  // The largest half, and the midpoint above it (to infinity).
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-std::numeric_limits<float>::infinity()), 0xfc00);
}

// The span functions (F16C where the CPU has it) against the scalar ones:
// every half, floats of every exponent, lengths that leave a scalar tail.
TEST(CompressionTest, SpansGiveTheScalarBits) {
  std::vector<uint16_t> halves(0x10000 + 5);
  for (size_t h = 0; h < halves.size(); ++h) halves[h] = h & 0xffff;
  std::vector<float> widened(halves.size());
  HalvesToFloats(halves, absl::MakeSpan(widened));
  for (size_t h = 0; h < halves.size(); ++h) {
    const float scalar = HalfToFloat(halves[h]);
    if (std::isnan(scalar)) {
      ASSERT_TRUE(std::isnan(widened[h])) << h;
    } else {
      ASSERT_EQ(std::memcmp(&widened[h], &scalar, sizeof(float)), 0) << h;
    }
  }
  std::mt19937 random(5);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> floats(100003);
  for (float& f : floats) {
    const uint32_t b = bits(random);
    std::memcpy(&f, &b, sizeof(f));
  }
  std::vector<uint16_t> narrowed(floats.size());
  FloatsToHalves(floats, absl::MakeSpan(narrowed));
  std::vector<uint16_t> sums(floats.size() - 1);
  SumHalvesInFloat(narrowed.data(), narrowed.data() + 1, sums.data(),
                   sums.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    if (std::isnan(floats[i])) {
      ASSERT_TRUE(std::isnan(HalfToFloat(narrowed[i]))) << i;
      continue;
    }
    ASSERT_EQ(narrowed[i], FloatToHalf(floats[i])) << floats[i];
    if (i + 1 == floats.size()) continue;
    const float sum = HalfToFloat(narrowed[i]) + HalfToFloat(narrowed[i + 1]);
    if (std::isnan(sum)) {
      ASSERT_TRUE(std::isnan(HalfToFloat(sums[i]))) << i;
    } else {
      ASSERT_EQ(sums[i], FloatToHalf(sum)) << i;
    }
  }
}

TEST(CompressionTest, BoundGrowsWithRanksAndMagnitude) {
  EXPECT_GT(Fp16SumBound(1.0, 4), Fp16SumBound(1.0, 2));
  EXPECT_GT(Fp16SumBound(2.0, 2), Fp16SumBound(1.0, 2));
  // About 2 N 2^-11 relative for small N.
  EXPECT_NEAR(Fp16SumBound(1.0, 1), 2 * (0x1p-11 + 0x1p-24), 2e-6);
}

}  // namespace
}  // namespace ps::allreduce
