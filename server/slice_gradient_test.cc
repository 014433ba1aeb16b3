#include "server/slice_gradient.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"
#include "common/tensor_codec.h"
#include "gtest/gtest.h"

namespace ps::server {
namespace {

std::vector<float> Values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f * i - 7.0f;
  return v;
}

// The encoding of `values` as a cord of pieces of `piece` bytes, as the
// network hands them over: elements straddle the pieces' edges.
absl::Cord InPieces(absl::Span<const float> values, size_t piece,
                    std::string* storage) {
  EncodeFloats(values, storage);
  const absl::string_view bytes = *storage;
  absl::Cord cord;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    cord.Append(absl::MakeCordFromExternal(bytes.substr(at, piece), [] {}));
  }
  return cord;
}

std::vector<float> ReadAll(const SliceGradient& g, uint64_t begin, size_t n) {
  std::vector<float> out(n, -1.0f);
  g.Read(begin, absl::MakeSpan(out));
  return out;
}

TEST(SliceGradientTest, ReadsAnyRangeAcrossChunksAddedInAnyOrder) {
  const std::vector<float> values = Values(50);
  const absl::Span<const float> all = values;
  std::string a, b, c;
  SliceGradient g;
  // Chunks [30, 50), [0, 13), [13, 30), in 7-byte pieces.
  g.Add(30, InPieces(all.subspan(30), 7, &c));
  g.Add(0, InPieces(all.subspan(0, 13), 7, &a));
  g.Add(13, InPieces(all.subspan(13, 17), 7, &b));
  EXPECT_EQ(g.num_elements(), 50u);
  for (size_t begin = 0; begin < values.size(); ++begin) {
    for (size_t n = 1; begin + n <= values.size(); ++n) {
      EXPECT_EQ(ReadAll(g, begin, n),
                std::vector<float>(values.begin() + begin,
                                   values.begin() + begin + n))
          << begin << " +" << n;
    }
  }
}

TEST(SliceGradientTest, ForEachPieceGivesTheBytesInElementOrder) {
  const std::vector<float> values = Values(50);
  const absl::Span<const float> all = values;
  std::string a, b, c;
  SliceGradient g;
  g.Add(30, InPieces(all.subspan(30), 7, &c));
  g.Add(0, InPieces(all.subspan(0, 13), 7, &a));
  g.Add(13, InPieces(all.subspan(13, 17), 7, &b));
  std::string joined;
  int pieces = 0;
  g.ForEachPiece([&](absl::string_view piece) {
    joined.append(piece.data(), piece.size());
    ++pieces;
  });
  std::string expected;
  EncodeFloats(all, &expected);
  EXPECT_EQ(joined, expected);
  EXPECT_GT(pieces, 3);
}

TEST(SliceGradientTest, ViewsRunsInPlaceAndCopiesOnlyAnElementSplitByPieces) {
  const std::vector<float> values = Values(30);
  std::string storage;
  SliceGradient g;
  // Elements 0-3 in the first 18-byte piece, element 4 split 2 + 2 bytes,
  // elements 5-8 in the rest of the second piece, and so on.
  g.Add(0, InPieces(values, 18, &storage));
  char scratch[sizeof(float)];
  const auto view = [&](uint64_t begin, size_t max) {
    return g.View(begin, max, absl::MakeSpan(scratch));
  };

  EncodedFloats run = view(0, 100);
  EXPECT_EQ(run.size(), 4u);  // What lies whole in the first piece.
  EXPECT_EQ(run[3], values[3]);
  run = view(1, 2);
  EXPECT_EQ(run.size(), 2u);  // At most what was asked for.
  EXPECT_EQ(run[0], values[1]);
  run = view(4, 100);
  EXPECT_EQ(run.size(), 1u);  // Split by the pieces' edge: copied alone.
  EXPECT_EQ(run[0], values[4]);
  run = view(5, 100);
  EXPECT_EQ(run.size(), 4u);  // Bytes 20-35 of the piece [18, 36).
  EXPECT_EQ(run[3], values[8]);

  // Read in place: the runs point into the received bytes, not a copy.
  std::fill_n(storage.begin(), sizeof(float), '\0');  // Element 0 := 0.0f.
  EXPECT_EQ(view(0, 1)[0], 0.0f);
  EXPECT_NE(values[0], 0.0f);
}

TEST(SliceGradientTest, ViewStopsAtTheEndOfAChunk) {
  const std::vector<float> values = Values(10);
  std::string storage;
  EncodeFloats(values, &storage);
  const absl::string_view bytes = storage;
  SliceGradient g;
  // Two chunks over adjacent bytes of one buffer: a run must still end
  // where its chunk does.
  g.Add(0, absl::MakeCordFromExternal(bytes.substr(0, 24), [] {}));
  g.Add(6, absl::MakeCordFromExternal(bytes.substr(24), [] {}));
  char scratch[sizeof(float)];
  EXPECT_EQ(g.View(2, 100, absl::MakeSpan(scratch)).size(), 4u);
  EXPECT_EQ(g.View(6, 100, absl::MakeSpan(scratch)).size(), 4u);
  EXPECT_EQ(ReadAll(g, 0, 10), values);
}

TEST(SliceGradientTest, FromFloatsHoldsTheValues) {
  const std::vector<float> values = Values(9);
  const SliceGradient g = SliceGradient::FromFloats(values);
  EXPECT_EQ(g.num_elements(), 9u);
  EXPECT_EQ(ReadAll(g, 0, 9), values);
  EXPECT_EQ(ReadAll(g, 4, 3),
            std::vector<float>(values.begin() + 4, values.begin() + 7));
  EXPECT_EQ(SliceGradient().num_elements(), 0u);
}

TEST(SliceGradientTest, CopiesShareTheBytesAndOutliveTheOriginal) {
  const std::vector<float> values = Values(20);
  SliceGradient copy;
  {
    SliceGradient original;
    // Owned by the cord, as the network buffers are; the last 8 bytes are
    // few enough for a cord to hold them inside itself.
    std::string bytes;
    EncodeFloats(values, &bytes);
    original.Add(0, absl::Cord(bytes.substr(0, 72)));
    original.Add(18, absl::Cord(bytes.substr(72)));
    copy = original;
  }
  EXPECT_EQ(ReadAll(copy, 0, 20), values);
}

}  // namespace
}  // namespace ps::server
