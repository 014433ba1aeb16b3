#ifndef PS_COMMON_TEMP_DIR_TESTING_H_
#define PS_COMMON_TEMP_DIR_TESTING_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps::testing {

// Where a test may write: Bazel's $TEST_TMPDIR, private to the test and
// removed after it; /tmp when run outside Bazel.
inline std::string TestTmpDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// TestTmpDir()/name with nothing there: whatever an earlier run of the test
// left is removed, and nothing is made.
inline std::string UnusedTestPath(absl::string_view name) {
  const std::string path = absl::StrCat(TestTmpDir(), "/", name);
  std::filesystem::remove_all(path);
  return path;
}

// TestTmpDir()/name as a new empty directory.
inline std::string FreshTestDir(absl::string_view name) {
  const std::string path = UnusedTestPath(name);
  std::filesystem::create_directories(path);
  return path;
}

// The bytes of the file at `path` (a model, a log, a checkpoint a test's
// processes wrote); "" where there is none.
inline std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace ps::testing

#endif  // PS_COMMON_TEMP_DIR_TESTING_H_
