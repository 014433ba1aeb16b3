#include "common/record_file.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void WriteAllBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

class RecordFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(WriteRecordFile(path_, "model", records_).ok());
  }

  std::string path_;
  const std::vector<std::string> records_ = {"first", std::string(1000, 'x'),
                                             "", "last"};
};

TEST(Crc32cTest, MatchesKnownValues) {
  // Test vectors from RFC 3720, B.4.
  EXPECT_EQ(crc32c::Value(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(crc32c::Value(std::string(32, '\xff')), 0x62a8ab43u);
  EXPECT_EQ(crc32c::Value("123456789"), 0xe3069283u);
  EXPECT_EQ(crc32c::Extend(crc32c::Value("1234"), "56789"), 0xe3069283u);
}

TEST_F(RecordFileTest, RoundTrips) {
  absl::StatusOr<std::vector<std::string>> read =
      ReadRecordFile(path_, "model");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, records_);
}

TEST_F(RecordFileTest, LeavesNoTemporaryFile) {
  std::ifstream tmp(path_ + ".tmp");
  EXPECT_FALSE(tmp.good());
}

TEST_F(RecordFileTest, RejectsEveryTruncation) {
  const std::string bytes = ReadAll(path_);
  for (size_t size = 0; size < bytes.size(); ++size) {
    WriteAllBytes(path_, bytes.substr(0, size));
    absl::StatusOr<std::vector<std::string>> read =
        ReadRecordFile(path_, "model");
    ASSERT_FALSE(read.ok()) << "truncated to " << size << " bytes was accepted";
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST_F(RecordFileTest, RejectsEveryFlippedByte) {
  const std::string bytes = ReadAll(path_);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string corrupted = bytes;
    corrupted[i] ^= 0x20;
    WriteAllBytes(path_, corrupted);
    absl::StatusOr<std::vector<std::string>> read =
        ReadRecordFile(path_, "model");
    ASSERT_FALSE(read.ok()) << "flipped byte " << i << " was accepted";
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST_F(RecordFileTest, RejectsTrailingBytes) {
  WriteAllBytes(path_, ReadAll(path_) + "x");
  EXPECT_EQ(ReadRecordFile(path_, "model").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(RecordFileTest, RejectsAnotherKind) {
  absl::StatusOr<std::vector<std::string>> read =
      ReadRecordFile(path_, "checkpoint");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
}

TEST(RecordFileMissingTest, ReportsNotFound) {
  EXPECT_EQ(ReadRecordFile(TempPath("does-not-exist"), "model").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(RecordFileEncodingTest, LengthPrefixedRejectsShortInput) {
  std::string buffer;
  PutLengthPrefixed(&buffer, "hello");
  absl::string_view input = buffer;
  absl::string_view value;
  ASSERT_TRUE(GetLengthPrefixed(&input, &value));
  EXPECT_EQ(value, "hello");
  EXPECT_TRUE(input.empty());
  absl::string_view truncated =
      absl::string_view(buffer).substr(0, buffer.size() - 1);
  EXPECT_FALSE(GetLengthPrefixed(&truncated, &value));
}

}  // namespace
}  // namespace ps
