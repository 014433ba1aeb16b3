#include "common/tensor_codec.h"

#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ps {
namespace {

// `bytes` as a cord of pieces of the given sizes, over `bytes` itself (as
// received bytes stay where the network put them).
absl::Cord InPieces(absl::string_view bytes,
                    std::initializer_list<size_t> sizes) {
  absl::Cord cord;
  for (size_t size : sizes) {
    cord.Append(absl::MakeCordFromExternal(bytes.substr(0, size), [] {}));
    bytes.remove_prefix(size);
  }
  return cord;
}

TEST(TensorCodecTest, RoundTripsValuesBitForBit) {
  const std::vector<float> values = {
      0.0f,       -0.0f, 1.5f,
      -3.25e-12f, 1e30f, std::numeric_limits<float>::infinity()};
  std::string bytes;
  EncodeFloats(values, &bytes);
  ASSERT_EQ(bytes.size(), values.size() * 4);
  std::vector<float> decoded(values.size());
  ASSERT_TRUE(DecodeFloats(bytes, absl::MakeSpan(decoded)).ok());
  EXPECT_EQ(std::memcmp(values.data(), decoded.data(), bytes.size()), 0);
}

TEST(TensorCodecTest, EncodesLittleEndian) {
  std::string bytes;
  EncodeFloats(std::vector<float>{1.0f}, &bytes);  // 0x3f800000
  EXPECT_EQ(bytes, std::string("\x00\x00\x80\x3f", 4));
}

TEST(TensorCodecTest, AppendKeepsWhatWasThere) {
  std::string bytes = "ab";
  AppendFloats(std::vector<float>{2.0f}, &bytes);
  EXPECT_EQ(bytes.size(), 6u);
  EXPECT_EQ(bytes.substr(0, 2), "ab");
}

TEST(TensorCodecTest, RejectsWrongLengthAndLeavesOutputUntouched) {
  std::vector<float> out = {7.0f, 7.0f};
  for (const std::string& bytes :
       {std::string(7, '\0'), std::string(9, '\0'), std::string()}) {
    absl::Status status = DecodeFloats(bytes, absl::MakeSpan(out));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(out[0], 7.0f);
  }
}

TEST(TensorCodecTest, DecodesBytesInPiecesSplitInsideElements) {
  const std::vector<float> values = {1.0f, -2.5f, 3.75f, 1e-20f};
  std::string bytes;
  EncodeFloats(values, &bytes);
  // Pieces of 3, 5 and 8 bytes: two elements straddle a boundary.
  const absl::Cord cord = InPieces(bytes, {3, 5, 8});
  std::vector<float> decoded(values.size());
  ASSERT_TRUE(DecodeFloats(cord, absl::MakeSpan(decoded)).ok());
  EXPECT_EQ(decoded, values);
}

TEST(TensorCodecTest, DecodesAnyRangeOfBytesInPieces) {
  std::vector<float> values(40);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * i - 3.0f;
  std::string bytes;
  EncodeFloats(values, &bytes);
  // Pieces of 33, 50 and 77 bytes, so that ranges start and end inside
  // pieces, on their edges and inside elements.
  const absl::Cord cord = InPieces(bytes, {33, 50, 77});
  for (size_t first = 0; first <= values.size(); ++first) {
    for (size_t n = 0; first + n <= values.size(); ++n) {
      std::vector<float> decoded(n);
      ASSERT_TRUE(DecodeFloatsAt(cord, first, absl::MakeSpan(decoded)).ok());
      EXPECT_EQ(decoded, std::vector<float>(values.begin() + first,
                                            values.begin() + first + n))
          << first << " +" << n;
    }
  }
  std::vector<float> out = {7.0f, 7.0f};
  EXPECT_EQ(DecodeFloatsAt(cord, 39, absl::MakeSpan(out)).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(DecodeFloatsAt(cord, 41, absl::MakeSpan(out).first(0)).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(out[0], 7.0f);
}

TEST(TensorCodecTest, EncodedFloatsReadsValuesAtAnyAlignment) {
  const std::vector<float> values = {1.0f, -2.5f, 3.75f, 1e-20f, -0.0f};
  std::string bytes;
  EncodeFloats(values, &bytes);
  // The same encoding starting at each offset of a word, as in network
  // buffers that keep no alignment.
  for (size_t shift = 0; shift < 4; ++shift) {
    const std::string shifted = std::string(shift, 'x') + bytes;
    const EncodedFloats view(absl::string_view(shifted).substr(shift));
    ASSERT_EQ(view.size(), values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const float read = view[i];  // Bits, so that -0.0 is told from 0.0.
      EXPECT_EQ(std::memcmp(&values[i], &read, sizeof(read)), 0)
          << "shift " << shift << " element " << i;
    }
  }
  EXPECT_EQ(EncodedFloats().size(), 0u);
}

TEST(TensorCodecTest, EncodeIntoWritesTheEncodingToTheBuffer) {
  const std::vector<float> values = {1.0f, -2.5f};
  char buffer[12] = {};
  const EncodedFloats view = EncodeInto(values, absl::MakeSpan(buffer));
  ASSERT_EQ(view.size(), 2u);
  EXPECT_EQ(view[1], -2.5f);
  std::string bytes;
  EncodeFloats(values, &bytes);
  EXPECT_EQ(std::string(buffer, 8), bytes);
  EXPECT_EQ(buffer[8], 0);  // Nothing past the values.
}

TEST(TensorCodecTest, EncodedViewReadsFloatMemoryInPlaceWhereItIsTheEncoding) {
  const std::vector<float> values = {4.0f, 0.5f, -8.0f};
  char scratch[12] = {};
  const EncodedFloats view = EncodedView(values, absl::MakeSpan(scratch));
  ASSERT_EQ(view.size(), 3u);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(view[i], values[i]);
  if (kFloatEncodingIsMemoryImage) {
    EXPECT_EQ(scratch[0], 0);  // Not copied.
  }
}

// `bytes` as a cord cut at the given increasing positions.
absl::Cord CutAt(absl::string_view bytes, std::vector<size_t> cuts) {
  absl::Cord cord;
  size_t from = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    cord.Append(
        absl::MakeCordFromExternal(bytes.substr(from, cut - from), [] {}));
    from = cut;
  }
  return cord;
}

TEST(TensorCodecTest, FindsTheFirstNonFiniteElementInAnyPiece) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values(3000, 1.5f);
  values[1] = std::numeric_limits<float>::max();  // Large, but finite.
  values[2] = std::numeric_limits<float>::denorm_min();
  std::string bytes;
  EncodeFloats(values, &bytes);
  EXPECT_EQ(FirstNonFinite(absl::Cord(bytes)), values.size());
  // Past the first vectorized block, in and across pieces, and the first
  // of several.
  for (uint64_t bad : {0, 1023, 1024, 2048, 2999}) {
    for (float value : {kInf, -kInf, kNan, -kNan}) {
      std::vector<float> poisoned = values;
      poisoned[bad] = value;
      poisoned[2999] = kNan;
      EncodeFloats(poisoned, &bytes);
      SCOPED_TRACE(::testing::Message() << "element " << bad << " " << value);
      EXPECT_EQ(FirstNonFinite(absl::Cord(bytes)), bad);
      // Cut inside the bad element (twice), and elsewhere.
      const size_t at = bad * sizeof(float);
      EXPECT_EQ(FirstNonFinite(CutAt(bytes, {at + 1, at + 3})), bad);
      EXPECT_EQ(FirstNonFinite(CutAt(bytes, {7, 4099, 8193})), bad);
    }
  }
  EXPECT_EQ(FirstNonFinite(absl::Cord()), 0u);
}

TEST(TensorCodecTest, RejectsPiecesOfTheWrongLengthAndLeavesOutputUntouched) {
  std::vector<float> out = {7.0f, 7.0f};
  absl::Status status =
      DecodeFloats(absl::Cord(std::string(9, '\0')), absl::MakeSpan(out));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out[0], 7.0f);
}

}  // namespace
}  // namespace ps
