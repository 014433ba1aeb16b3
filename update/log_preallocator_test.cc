#include "update/log_preallocator.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/temp_dir_testing.h"
#include "gtest/gtest.h"

namespace ps::update {
namespace {

class LogPreallocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ps::testing::FreshTestDir("log_preallocator") + "/file";
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override { ::close(fd_); }

  std::string Contents() const {
    std::ifstream in(path_, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)),
                       std::istreambuf_iterator<char>());
  }
  // Writes `n` bytes of `c` at `at`, as an appender would after Reserve.
  void Put(uint64_t at, uint64_t n, char c) {
    const std::string bytes(n, c);
    ASSERT_EQ(::pwrite(fd_, bytes.data(), n, static_cast<off_t>(at)),
              static_cast<ssize_t>(n));
  }

  std::string path_;
  int fd_ = -1;
};

TEST_F(LogPreallocatorTest, WritesZerosAheadOfTheAppender) {
  LogPreallocator ahead(fd_, 0, /*ahead=*/64 << 10, /*chunk=*/4096);
  ahead.WaitUntilAhead();
  EXPECT_EQ(std::filesystem::file_size(path_), 64u << 10);
  // More than half of `ahead` is left: nothing more is written yet.
  ahead.Reserve(10000);
  Put(0, 10000, 'x');
  ahead.WaitUntilAhead();
  EXPECT_EQ(ahead.written(), 64u << 10);
  // Less than half: filled up to `ahead` again.
  ahead.Reserve(40000);
  Put(10000, 30000, 'y');
  ahead.WaitUntilAhead();
  EXPECT_EQ(ahead.written(), 40000u + (64 << 10));
  const std::string bytes = Contents();
  ASSERT_EQ(bytes.size(), 40000u + (64 << 10));
  EXPECT_EQ(bytes.substr(0, 10000), std::string(10000, 'x'));
  EXPECT_EQ(bytes.substr(10000, 30000), std::string(30000, 'y'));
  EXPECT_EQ(bytes.substr(40000), std::string(64 << 10, '\0'));
}

TEST_F(LogPreallocatorTest, KeepsTheBytesItWasToldExist) {
  Put(0, 300, 'y');
  {
    LogPreallocator ahead(fd_, /*written=*/300, /*ahead=*/1000, 128);
    ahead.Reserve(100);  // 200 bytes left ahead: filled up to 1100.
    ahead.WaitUntilAhead();
    EXPECT_EQ(ahead.written(), 1100u);
  }
  const std::string bytes = Contents();
  ASSERT_EQ(bytes.size(), 1100u);
  EXPECT_EQ(bytes.substr(0, 300), std::string(300, 'y'));
  EXPECT_EQ(bytes.substr(300), std::string(800, '\0'));
}

// The appender's bytes are never written over with zeros, however the
// two threads interleave.
TEST_F(LogPreallocatorTest, NeverWritesBelowWhatTheAppenderReserved) {
  uint64_t end = 0;
  {
    LogPreallocator ahead(fd_, 0, /*ahead=*/8192, /*chunk=*/512);
    for (int i = 0; i < 2000; ++i) {
      const uint64_t n = 1 + (i * 7919) % 1500;
      ahead.Reserve(end + n);
      Put(end, n, 'a' + i % 26);
      end += n;
    }
  }
  const std::string bytes = Contents();
  ASSERT_GE(bytes.size(), end);
  uint64_t at = 0;
  for (int i = 0; i < 2000; ++i) {
    const uint64_t n = 1 + (i * 7919) % 1500;
    ASSERT_EQ(bytes.substr(at, n), std::string(n, 'a' + i % 26))
        << "append " << i << " at " << at;
    at += n;
  }
  EXPECT_EQ(bytes.substr(end), std::string(bytes.size() - end, '\0'));
}

TEST_F(LogPreallocatorTest, StopsWhenWritingFails) {
  const int read_only = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  {
    LogPreallocator ahead(read_only, 0, 4096);
    ahead.WaitUntilAhead();  // Returns: the write failed.
    EXPECT_EQ(ahead.written(), 0u);
  }
  ::close(read_only);
  EXPECT_EQ(std::filesystem::file_size(path_), 0u);
}

}  // namespace
}  // namespace ps::update
