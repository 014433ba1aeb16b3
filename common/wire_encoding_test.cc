#include "common/wire_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "absl/strings/cord.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::HasSubstr;

float FloatOf(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint32_t BitsOf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

// The encoded value nearest `x` among every value of the 16-bit format
// (ties: the one with an even last bit), found by brute force: the
// reference the bit tricks are checked against.
uint16_t NearestByBruteForce(float x, float (*decode)(uint16_t)) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double best_error = INFINITY;
  uint16_t best = 0;
  for (uint32_t h = 0; h <= 0x7c00; ++h) {
    // Rounding treats infinity as the next value past the largest finite.
    const double candidate =
        h == 0x7c00 ? 65536.0 : double{decode(static_cast<uint16_t>(h))};
    const double error = std::fabs(std::fabs(double{x}) - candidate);
    if (error < best_error || (error == best_error && (h & 1) == 0)) {
      best_error = error;
      best = static_cast<uint16_t>(h);
    }
  }
  return sign | best;
}

TEST(WireEncodingTest, Bfloat16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8))),
            1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: up (even).
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(1.0f + 3 * std::ldexp(1.0f, -8))),
            1.0f + std::ldexp(1.0f, -6));
  // Just above the tie rounds up.
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(
                FloatOf(BitsOf(1.0f + std::ldexp(1.0f, -8)) + 1))),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(FloatToBfloat16(-2.0f), 0xc000);
}

TEST(WireEncodingTest, Bfloat16MatchesNearestOfTheTwoNeighbours) {
  std::mt19937 random(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 100000; ++i) {
    const uint32_t x_bits = bits(random);
    const float x = FloatOf(x_bits);
    if (std::isnan(x) || std::isinf(x)) continue;
    // The two bfloat16 values around x (same sign): truncated, and one
    // step further from zero (infinity past the largest finite one).
    const uint32_t down = x_bits & 0xffff0000u;
    const uint32_t up = down + 0x10000u;
    const double to_down = std::fabs(double{x} - double{FloatOf(down)});
    // Rounding treats infinity as the next value past the largest finite.
    const double up_value = (up & 0x7fffffffu) == 0x7f800000u
                                ? std::copysign(std::ldexp(1.0, 128), x)
                                : double{FloatOf(up)};
    const double to_up = std::fabs(up_value - double{x});
    const uint32_t expected =
        to_down < to_up || (to_down == to_up && ((down >> 16) & 1) == 0) ? down
                                                                         : up;
    ASSERT_EQ(FloatToBfloat16(x), expected >> 16) << x;
  }
}

TEST(WireEncodingTest, Float16MatchesBruteForce) {
  std::mt19937 random(11);
  std::uniform_real_distribution<float> exponent(-27, 17);
  std::uniform_real_distribution<float> mantissa(1, 2);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               65504.0f,
                               65519.0f,
                               std::ldexp(1.0f, -14),
                               std::ldexp(1.0f, -24),
                               std::ldexp(1.0f, -25),  // Tie: to 0 (even).
                               std::ldexp(3.0f, -25),  // Tie: up to 2^-23.
                               std::ldexp(1.0f, -26),
                               1.0f + std::ldexp(1.0f, -11),  // Tie: to 1.
                               1.0f + 3 * std::ldexp(1.0f, -11)};
  for (int i = 0; i < 300; ++i) {
    const float x = mantissa(random) * std::exp2(exponent(random));
    values.push_back(i % 2 == 0 ? x : -x);
  }
  for (float x : values) {
    EXPECT_EQ(FloatToFloat16(x), NearestByBruteForce(x, Float16ToFloat))
        << "x = " << x;
  }
}

TEST(WireEncodingTest, Float16DecodesEveryFiniteValueExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Float16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(h & 0x7c00, 0x7c00u);
      continue;
    }
    // Every binary16 is a binary32: the round trip gives the same bits.
    EXPECT_EQ(FloatToFloat16(f), h) << h;
  }
}

TEST(WireEncodingTest, SubnormalsAndOverflow) {
  // Float32 denormals keep bfloat16's exponent range.
  const float denormal = FloatOf(0x00010000);
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(denormal)), denormal);
  // Binary16 subnormals: the smallest, and below half of it 0.
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(std::ldexp(1.0f, -24))),
            std::ldexp(1.0f, -24));
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(std::ldexp(1.0f, -26))), 0.0f);
  EXPECT_TRUE(std::signbit(Float16ToFloat(FloatToFloat16(-1e-30f))));
  // Past the largest finite value: infinite.
  EXPECT_TRUE(std::isinf(Float16ToFloat(FloatToFloat16(65520.0f))));
  EXPECT_EQ(Float16ToFloat(FloatToFloat16(-1e10f)),
            -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isinf(
      Bfloat16ToFloat(FloatToBfloat16(std::numeric_limits<float>::max()))));
}

TEST(WireEncodingTest, NanAndInfinityStay) {
  const float inf = std::numeric_limits<float>::infinity();
  for (WireEncoding e : {WireEncoding::kBfloat16, WireEncoding::kFloat16}) {
    EXPECT_EQ(RoundTrip(e, inf), inf);
    EXPECT_EQ(RoundTrip(e, -inf), -inf);
    EXPECT_TRUE(std::isnan(RoundTrip(e, std::nanf(""))));
    // A NaN whose payload sits only in the bits rounded away stays NaN.
    EXPECT_TRUE(std::isnan(RoundTrip(e, FloatOf(0x7f800001))));
    EXPECT_TRUE(std::signbit(RoundTrip(e, FloatOf(0xff800001))));
  }
}

TEST(WireEncodingTest, DenseRoundTripWithinHalfAnUlp) {
  std::mt19937 random(3);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> values(1000);
  for (float& v : values) v = normal(random);
  for (auto [e, bits] : {std::pair{WireEncoding::kBfloat16, 8},
                         std::pair{WireEncoding::kFloat16, 11},
                         std::pair{WireEncoding::kFloat32, 24}}) {
    std::string bytes;
    AppendEncoded(e, values, &bytes);
    EXPECT_EQ(bytes.size(),
              values.size() * (e == WireEncoding::kFloat32 ? 4 : 2));
    std::vector<float> out(values.size());
    ASSERT_TRUE(DecodeEncoded(e, absl::Cord(bytes), absl::MakeSpan(out)).ok());
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_LE(std::fabs(out[i] - values[i]),
                std::ldexp(std::fabs(values[i]), -bits))
          << WireEncodingName(e) << " " << values[i];
      EXPECT_EQ(out[i], RoundTrip(e, values[i]));
    }
  }
}

TEST(WireEncodingTest, DecodesPiecesSplitMidElement) {
  const std::vector<float> values = {1.5f, -2.25f, 3.0f};
  std::string bytes;
  AppendEncoded(WireEncoding::kFloat16, values, &bytes);
  absl::Cord cord;
  cord.Append(bytes.substr(0, 3));  // Splits the second element.
  cord.Append(bytes.substr(3));
  std::vector<float> out(3);
  ASSERT_TRUE(
      DecodeEncoded(WireEncoding::kFloat16, cord, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, values);
}

// A cord of `bytes` in external pieces of the given sizes, in turn (none
// merged, unlike small appends): each piece is one of Chunks().
absl::Cord CordOfPieces(const std::string& bytes, std::vector<size_t> sizes) {
  absl::Cord cord;
  for (size_t at = 0, i = 0; at < bytes.size(); ++i) {
    const size_t size = std::min(sizes[i % sizes.size()], bytes.size() - at);
    cord.Append(absl::MakeCordFromExternal(
        absl::string_view(bytes).substr(at, size), [] {}));
    at += size;
  }
  return cord;
}

TEST(WireEncodingTest, DecodesEveryHalfWordAsOneValueDoesAcrossPieces) {
  // Every 16-bit pattern, in pieces that split elements (odd sizes) and
  // hold whole ones, decodes to the bits the one-value functions give.
  std::string bytes;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    bytes.push_back(static_cast<char>(h & 0xff));
    bytes.push_back(static_cast<char>(h >> 8));
  }
  const absl::Cord cord = CordOfPieces(bytes, {1, 4097, 30, 3, 65536});
  size_t pieces = 0, odd = 0;
  for (absl::string_view piece : cord.Chunks()) {
    ++pieces;
    odd += piece.size() % 2;
  }
  ASSERT_GT(pieces, 3u);
  ASSERT_GT(odd, 0u);  // Some element is split.
  std::vector<float> out(0x10000);
  for (WireEncoding e : {WireEncoding::kBfloat16, WireEncoding::kFloat16}) {
    ASSERT_TRUE(DecodeEncoded(e, cord, absl::MakeSpan(out)).ok());
    size_t wrong = 0;
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float want = e == WireEncoding::kBfloat16
                             ? Bfloat16ToFloat(static_cast<uint16_t>(h))
                             : Float16ToFloat(static_cast<uint16_t>(h));
      // A NaN may come out quieted (the float16 scale's multiply).
      const bool same =
          std::isnan(want)
              ? std::isnan(out[h]) && std::signbit(out[h]) == std::signbit(want)
              : BitsOf(out[h]) == BitsOf(want);
      if (!same) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << WireEncodingName(e);
  }
  // With a scale, each value is the unscaled one times 2^-e.
  ASSERT_TRUE(DecodeEncoded(WireEncoding::kFloat16, cord, absl::MakeSpan(out),
                            /*scale_exponent=*/20)
                  .ok());
  EXPECT_EQ(out[0x3c00], std::ldexp(1.0f, -20));  // 1.0 in binary16.
  EXPECT_EQ(out[0x0001], std::ldexp(1.0f, -44));  // The smallest subnormal.
}

#if defined(__SSE2__)
TEST(WireEncodingTest, Float16SubnormalsStayExactWhereDenormalsAreFlushed) {
  // torch.set_flush_denormal(True) sets these MXCSR bits (flush to zero,
  // denormals are zero) in the process our Python client runs in.
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);
  std::string bytes;
  for (uint16_t h : {0x0001, 0x03ff, 0x8200, 0x0400}) {
    bytes.push_back(static_cast<char>(h & 0xff));
    bytes.push_back(static_cast<char>(h >> 8));
  }
  std::vector<float> out(4);
  const absl::Status status = DecodeEncoded(
      WireEncoding::kFloat16, absl::Cord(bytes), absl::MakeSpan(out));
  _mm_setcsr(saved);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(out[0], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[1], std::ldexp(1023.0f, -24));
  EXPECT_EQ(out[2], -std::ldexp(512.0f, -24));
  EXPECT_EQ(out[3], std::ldexp(1.0f, -14));
}
#endif

TEST(WireEncodingTest, TopKWritesNonZerosAndDecodesTheRestAsZero) {
  const std::vector<float> values = {0, 3.5f, 0, 0, -1.25f, 0};
  std::string bytes;
  AppendEncoded(WireEncoding::kTopK, values, &bytes);
  EXPECT_EQ(bytes.size(), 16u);
  std::vector<float> out(6, 9.0f);
  ASSERT_TRUE(
      DecodeEncoded(WireEncoding::kTopK, absl::Cord(bytes), absl::MakeSpan(out))
          .ok());
  EXPECT_EQ(out, values);
}

std::string Pairs(std::vector<std::pair<uint32_t, float>> pairs) {
  std::string out;
  for (auto [index, value] : pairs) {
    char b[8];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(index >> (8 * i));
    const uint32_t v = BitsOf(value);
    for (int i = 0; i < 4; ++i) b[4 + i] = static_cast<char>(v >> (8 * i));
    out.append(b, 8);
  }
  return out;
}

TEST(WireEncodingTest, RefusesTopKIndexOutOfRange) {
  std::vector<float> out(4);
  absl::Status s = DecodeEncoded(WireEncoding::kTopK,
                                 absl::Cord(Pairs({{1, 1.0f}, {4, 2.0f}})),
                                 absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("index 4"));
}

TEST(WireEncodingTest, RefusesTopKDuplicateOrUnorderedIndices) {
  std::vector<float> out(4);
  absl::Status dup = DecodeEncoded(WireEncoding::kTopK,
                                   absl::Cord(Pairs({{2, 1.0f}, {2, 2.0f}})),
                                   absl::MakeSpan(out));
  EXPECT_EQ(dup.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dup.message(), HasSubstr("strictly increase"));
  absl::Status back = DecodeEncoded(WireEncoding::kTopK,
                                    absl::Cord(Pairs({{3, 1.0f}, {1, 2.0f}})),
                                    absl::MakeSpan(out));
  EXPECT_EQ(back.code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireEncodingTest, RefusesWrongLengths) {
  std::vector<float> out(4);
  for (auto [e, size] : {std::pair{WireEncoding::kBfloat16, 7},
                         std::pair{WireEncoding::kFloat16, 16},
                         std::pair{WireEncoding::kFloat32, 8},
                         std::pair{WireEncoding::kTopK, 12},
                         std::pair{WireEncoding::kTopK, 40}}) {
    absl::Status s = DecodeEncoded(e, absl::Cord(std::string(size, '\0')),
                                   absl::MakeSpan(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << WireEncodingName(e) << " " << size;
    EXPECT_THAT(s.message(), HasSubstr(WireEncodingName(e)));
  }
}

TEST(WireEncodingTest, Float16ScaleKeepsTinyGradientsBits) {
  // Below float16's subnormals unscaled; 11 significant bits scaled.
  const std::vector<float> values = {3e-9f, -1.2345e-7f, 2e-6f, 0.0f};
  const int scale = Float16ScaleExponent(values);
  EXPECT_EQ(scale, 14 - std::ilogb(2e-6f));
  EXPECT_EQ(RoundTrip(WireEncoding::kFloat16, 3e-9f), 0.0f);  // Unscaled.
  std::string bytes;
  AppendEncoded(WireEncoding::kFloat16, values, &bytes, scale);
  std::vector<float> out(values.size());
  ASSERT_TRUE(DecodeEncoded(WireEncoding::kFloat16, absl::Cord(bytes),
                            absl::MakeSpan(out), scale)
                  .ok());
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_LE(std::fabs(out[i] - values[i]),
              std::ldexp(std::fabs(values[i]), -11))
        << values[i];
  }
  // The largest lands in [2^14, 2^15): no overflow, however large.
  EXPECT_EQ(Float16ScaleExponent(std::vector<float>{1e6f, -3.0f}),
            14 - std::ilogb(1e6f));
  EXPECT_EQ(Float16ScaleExponent(std::vector<float>{0.0f}), 0);
  EXPECT_EQ(Float16ScaleExponent(std::vector<float>{1e-38f}),
            kMaxScaleExponent);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Float16ScaleExponent(std::vector<float>{inf, 1.0f}), 14);
}

TEST(WireEncodingTest, EncodeChunkScalesFloat16Only) {
  const std::vector<float> values = {1e-7f, -2e-7f};
  const EncodedChunk half = EncodeChunk(WireEncoding::kFloat16, values);
  EXPECT_EQ(half.scale_exponent, Float16ScaleExponent(values));
  std::vector<float> out(2);
  ASSERT_TRUE(DecodeEncoded(WireEncoding::kFloat16, absl::Cord(half.bytes),
                            absl::MakeSpan(out), half.scale_exponent)
                  .ok());
  EXPECT_NEAR(out[1], -2e-7f, 2e-7 * 0x1p-11);
  const EncodedChunk bf16 = EncodeChunk(WireEncoding::kBfloat16, values);
  EXPECT_EQ(bf16.scale_exponent, 0);
  EXPECT_EQ(bf16.bytes.size(), 4u);
}

TEST(WireEncodingTest, RefusesAScaleOutOfRangeOrForOtherEncodings) {
  std::vector<float> out(1);
  absl::Cord two_bytes(std::string(2, '\0'));
  EXPECT_EQ(DecodeEncoded(WireEncoding::kFloat16, two_bytes,
                          absl::MakeSpan(out), kMaxScaleExponent + 1)
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s =
      DecodeEncoded(WireEncoding::kBfloat16, two_bytes, absl::MakeSpan(out), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("scale exponent 3 with bfloat16"));
}

TEST(WireEncodingTest, UnknownNumberIsRefused) {
  EXPECT_EQ(*WireEncodingFromNumber(1), WireEncoding::kBfloat16);
  absl::StatusOr<WireEncoding> e = WireEncodingFromNumber(9);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(e.status().message(), HasSubstr("unknown encoding 9"));
}

}  // namespace
}  // namespace ps
