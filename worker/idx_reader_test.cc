#include "worker/idx_reader.h"

#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

using ::testing::HasSubstr;

constexpr char kInstalledDir[] = "/usr/share/datasets/fashion-mnist";

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// A new, empty directory of its own: the temp root may hold files of an
// earlier run (outside Bazel, /tmp is shared and kept).
std::string FreshTempDir() {
  std::string dir = absl::StrCat(TempDir(), "/idx_reader_test.XXXXXX");
  EXPECT_NE(mkdtemp(dir.data()), nullptr) << dir;
  return dir;
}

std::string TempPath(const std::string& name) {
  const std::string base = TempDir();
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat(base, "/", info->name(), "_", name);
}

void AppendBigEndian(uint32_t v, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

// An IDX file: magic, sizes, then `body` (not checked against the sizes, so
// tests can write inconsistent files).
std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     const std::vector<uint8_t>& body) {
  std::string out;
  AppendBigEndian(magic, &out);
  for (uint32_t d : dims) AppendBigEndian(d, &out);
  out.append(body.begin(), body.end());
  return out;
}

void WritePlain(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), bytes.size());
  ASSERT_TRUE(f.good()) << path;
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Pixels that do not compress to nothing, so gzip tests have a real body.
std::vector<uint8_t> Pixels(size_t n) {
  std::vector<uint8_t> out(n);
  uint32_t x = 12345;
  for (auto& p : out) {
    x = x * 1103515245u + 12345u;
    p = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

// Writes a consistent 3-image 2x2 set and returns {images, labels} paths.
std::pair<std::string, std::string> WriteSmallSet(bool gzip) {
  const std::string images = TempPath("images");
  const std::string labels = TempPath("labels");
  const std::string image_bytes =
      IdxBytes(kIdxImagesMagic, {3, 2, 2},
               {0, 255, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100});
  const std::string label_bytes = IdxBytes(kIdxLabelsMagic, {3}, {9, 0, 4});
  if (gzip) {
    WriteGzip(images, image_bytes);
    WriteGzip(labels, label_bytes);
  } else {
    WritePlain(images, image_bytes);
    WritePlain(labels, label_bytes);
  }
  return {images, labels};
}

void ExpectSmallSet(const LabeledImages& set) {
  EXPECT_EQ(set.num_examples, 3);
  EXPECT_EQ(set.rows, 2);
  EXPECT_EQ(set.cols, 2);
  ASSERT_EQ(set.images.size(), 12u);
  EXPECT_FLOAT_EQ(set.images[0], NormalizePixel(0));
  EXPECT_FLOAT_EQ(set.images[1], NormalizePixel(255));
  EXPECT_FLOAT_EQ(set.images[11], NormalizePixel(100));
  EXPECT_EQ(set.labels, (std::vector<float>{9, 0, 4}));
}

TEST(IdxReaderTest, NormalizesWithFashionMnistMeanAndStd) {
  EXPECT_FLOAT_EQ(NormalizePixel(0), -0.2860f / 0.3530f);
  EXPECT_FLOAT_EQ(NormalizePixel(255), (1.0f - 0.2860f) / 0.3530f);
  EXPECT_FLOAT_EQ(NormalizePixel(51), (0.2f - 0.2860f) / 0.3530f);
}

TEST(IdxReaderTest, LoadsUncompressedFiles) {
  auto [images, labels] = WriteSmallSet(/*gzip=*/false);
  absl::StatusOr<LabeledImages> set = LoadLabeledImages(images, labels);
  ASSERT_TRUE(set.ok()) << set.status();
  ExpectSmallSet(*set);
}

TEST(IdxReaderTest, LoadsGzippedFiles) {
  auto [images, labels] = WriteSmallSet(/*gzip=*/true);
  ASSERT_EQ(ReadBytes(images).substr(0, 2), "\x1f\x8b");
  absl::StatusOr<LabeledImages> set = LoadLabeledImages(images, labels);
  ASSERT_TRUE(set.ok()) << set.status();
  ExpectSmallSet(*set);
}

TEST(IdxReaderTest, ReadsDimsAndRawBytes) {
  const std::string path = TempPath("images");
  WriteGzip(path, IdxBytes(kIdxImagesMagic, {2, 1, 3}, {1, 2, 3, 4, 5, 6}));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  ASSERT_TRUE(array.ok()) << array.status();
  EXPECT_EQ(array->dims, (std::vector<uint32_t>{2, 1, 3}));
  EXPECT_EQ(array->data, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
}

TEST(IdxReaderTest, MissingFileIsNotFound) {
  const std::string path = TempPath("absent");
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxLabelsMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(array.status().message(), HasSubstr(path));
}

TEST(IdxReaderTest, RejectsDirectory) {
  absl::StatusOr<IdxArray> array = ReadIdxFile(TempDir(), kIdxLabelsMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr("not a regular file"));
}

TEST(IdxReaderTest, RejectsWrongMagic) {
  const std::string path = TempPath("images");
  WritePlain(path, "PK\x03\x04 not an idx file at all");
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr("not an IDX file"));
  EXPECT_THAT(array.status().message(), HasSubstr(path));
}

TEST(IdxReaderTest, RejectsUnsupportedElementType) {
  const std::string path = TempPath("images");
  WritePlain(path, IdxBytes(0x00000D03, {1, 1, 1}, {0, 0, 0, 0}));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr("element type 0x0d"));
}

TEST(IdxReaderTest, RejectsLabelsFileWhereImagesExpected) {
  const std::string path = TempPath("labels");
  WritePlain(path, IdxBytes(kIdxLabelsMagic, {2}, {1, 2}));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr("has 1 dimensions"));
}

TEST(IdxReaderTest, RejectsEmptyFile) {
  const std::string path = TempPath("empty");
  WritePlain(path, "");
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxLabelsMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("truncated header"));
}

TEST(IdxReaderTest, RejectsTruncatedSizes) {
  const std::string path = TempPath("images");
  WritePlain(path, IdxBytes(kIdxImagesMagic, {5, 28}, {}));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("truncated header sizes"));
}

TEST(IdxReaderTest, RejectsTruncatedData) {
  const std::string path = TempPath("images");
  WritePlain(path, IdxBytes(kIdxImagesMagic, {2, 2, 2}, Pixels(7)));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("7 of 8 bytes"));
}

TEST(IdxReaderTest, RejectsTruncatedGzipStream) {
  const std::string path = TempPath("images");
  WriteGzip(path, IdxBytes(kIdxImagesMagic, {10, 28, 28}, Pixels(7840)));
  const std::string whole = ReadBytes(path);
  WritePlain(path, whole.substr(0, whole.size() / 2));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr(path));
}

TEST(IdxReaderTest, RejectsGzipStreamCutInItsTrailer) {
  const std::string path = TempPath("labels");
  WriteGzip(path, IdxBytes(kIdxLabelsMagic, {3}, {1, 2, 3}));
  const std::string whole = ReadBytes(path);
  WritePlain(path, whole.substr(0, whole.size() - 4));  // drop ISIZE
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxLabelsMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr("before its trailer"));
}

TEST(IdxReaderTest, RejectsCorruptGzipData) {
  const std::string path = TempPath("images");
  WriteGzip(path, IdxBytes(kIdxImagesMagic, {10, 28, 28}, Pixels(7840)));
  std::string bytes = ReadBytes(path);
  for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 16; ++i) {
    bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  }
  WritePlain(path, bytes);
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss)
      << array.status();
  EXPECT_THAT(array.status().message(), HasSubstr("corrupt gzip"));
}

TEST(IdxReaderTest, RejectsTrailingData) {
  for (bool gzip : {false, true}) {
    const std::string path = TempPath(gzip ? "gz" : "plain");
    const std::string bytes = IdxBytes(kIdxLabelsMagic, {3}, {1, 2, 3, 4});
    if (gzip) {
      WriteGzip(path, bytes);
    } else {
      WritePlain(path, bytes);
    }
    absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxLabelsMagic);
    EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss) << gzip;
    EXPECT_THAT(array.status().message(), HasSubstr("trailing data"));
  }
}

TEST(IdxReaderTest, RejectsAbsurdSizesBeforeReadingData) {
  const std::string path = TempPath("images");
  WritePlain(path, IdxBytes(kIdxImagesMagic, {0xffffffff, 28, 28}, {1, 2}));
  absl::StatusOr<IdxArray> array = ReadIdxFile(path, kIdxImagesMagic);
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(array.status().message(), HasSubstr("more than"));
}

TEST(IdxReaderTest, RejectsCountMismatch) {
  const std::string images = TempPath("images");
  const std::string labels = TempPath("labels");
  WritePlain(images, IdxBytes(kIdxImagesMagic, {3, 1, 1}, {1, 2, 3}));
  WritePlain(labels, IdxBytes(kIdxLabelsMagic, {2}, {1, 2}));
  absl::StatusOr<LabeledImages> set = LoadLabeledImages(images, labels);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(set.status().message(), HasSubstr("has 2 labels"));
  EXPECT_THAT(set.status().message(), HasSubstr("has 3 images"));
}

TEST(IdxReaderTest, RejectsLabelOutOfRange) {
  const std::string images = TempPath("images");
  const std::string labels = TempPath("labels");
  WritePlain(images, IdxBytes(kIdxImagesMagic, {3, 1, 1}, {1, 2, 3}));
  WritePlain(labels, IdxBytes(kIdxLabelsMagic, {3}, {1, 10, 2}));
  absl::StatusOr<LabeledImages> set = LoadLabeledImages(images, labels);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(set.status().message(), HasSubstr("label 10 of example 1"));
}

TEST(IdxReaderTest, RejectsEmptyImages) {
  const std::string images = TempPath("images");
  const std::string labels = TempPath("labels");
  WritePlain(images, IdxBytes(kIdxImagesMagic, {2, 0, 28}, {}));
  WritePlain(labels, IdxBytes(kIdxLabelsMagic, {2}, {1, 2}));
  absl::StatusOr<LabeledImages> set = LoadLabeledImages(images, labels);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(set.status().message(), HasSubstr("empty image set"));
}

TEST(IdxReaderTest, LoadFashionMnistFallsBackToUncompressedFiles) {
  // Only the files written here: no stale .gz to prefer, no train-* split.
  const std::string dir = FreshTempDir();
  WritePlain(dir + "/t10k-images-idx3-ubyte",
             IdxBytes(kIdxImagesMagic, {2, 1, 2}, {0, 255, 255, 0}));
  WriteGzip(dir + "/t10k-labels-idx1-ubyte.gz",
            IdxBytes(kIdxLabelsMagic, {2}, {3, 7}));
  absl::StatusOr<LabeledImages> set = LoadFashionMnist(dir, Split::kTest);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->num_examples, 2);
  EXPECT_EQ(set->labels, (std::vector<float>{3, 7}));

  absl::StatusOr<LabeledImages> train = LoadFashionMnist(dir, Split::kTrain);
  EXPECT_EQ(train.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(train.status().message(),
              HasSubstr("train-images-idx3-ubyte.gz"));
}

// The real data, as installed by scripts/install_deps.sh.
TEST(IdxReaderTest, LoadsInstalledFashionMnistTestSplit) {
  absl::StatusOr<LabeledImages> set =
      LoadFashionMnist(kInstalledDir, Split::kTest);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->num_examples, 10000);
  EXPECT_EQ(set->rows, 28);
  EXPECT_EQ(set->cols, 28);
  ASSERT_EQ(set->images.size(), 10000u * 28 * 28);
  ASSERT_EQ(set->labels.size(), 10000u);

  double sum = 0;
  float lo = set->images[0], hi = set->images[0];
  for (float v : set->images) {
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_FLOAT_EQ(lo, NormalizePixel(0));
  EXPECT_FLOAT_EQ(hi, NormalizePixel(255));
  // Standardized with the training statistics, the test split is near zero
  // mean.
  EXPECT_NEAR(sum / set->images.size(), 0.0, 0.05);

  // The test split is balanced: 1000 examples of each class.
  std::vector<int> per_class(kFashionMnistClasses, 0);
  for (float label : set->labels) ++per_class[static_cast<int>(label)];
  EXPECT_EQ(per_class, std::vector<int>(kFashionMnistClasses, 1000));
}

}  // namespace
}  // namespace ps::worker
