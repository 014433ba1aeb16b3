#include "deploy/local/binary_locator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, ".", getpid());
  EXPECT_EQ(system(absl::StrCat("rm -rf ", dir, " && mkdir -p ", dir).c_str()),
            0);
  return dir;
}

void MakeFile(const std::string& path, bool executable) {
  ASSERT_EQ(system(absl::StrCat("mkdir -p $(dirname ", path, ")").c_str()), 0);
  std::ofstream(path) << "#!/bin/sh\n";
  ASSERT_EQ(chmod(path.c_str(), executable ? 0755 : 0644), 0);
}

TEST(BinaryLocatorTest, ListsRunfilesThenTheBinTree) {
  LauncherLocation location{"/out/bin/deploy/local/launch",
                            "bazel-bin/deploy/local/launch", "/rf"};
  EXPECT_THAT(BinaryCandidates(location, "server/server"),
              ElementsAre("/rf/paramserver/server/server",
                          "/out/bin/deploy/local/launch.runfiles/paramserver/"
                          "server/server",
                          "/out/bin/server/server",
                          "bazel-bin/deploy/local/launch.runfiles/paramserver/"
                          "server/server",
                          "bazel-bin/server/server"));
}

TEST(BinaryLocatorTest, FindsTheSiblingInTheBinTree) {
  const std::string bin = TestDir("bin_tree");
  MakeFile(bin + "/deploy/local/launch", true);
  MakeFile(bin + "/server/server", true);
  LauncherLocation location{bin + "/deploy/local/launch", "launch", ""};
  absl::StatusOr<std::string> found = FindSiblingBinary(
      location, "server/server", "//server:server", "server_binary");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, bin + "/server/server");
}

TEST(BinaryLocatorTest, PrefersRunfilesAndSkipsNonExecutables) {
  const std::string dir = TestDir("runfiles");
  MakeFile(dir + "/launch.runfiles/paramserver/worker/worker", false);
  MakeFile(dir + "/rf/paramserver/worker/worker", true);
  LauncherLocation location{dir + "/launch", "", dir + "/rf"};
  EXPECT_EQ(*FindSiblingBinary(location, "worker/worker", "//worker:worker",
                               "worker_binary"),
            dir + "/rf/paramserver/worker/worker");
  location.runfiles_dir.clear();
  absl::StatusOr<std::string> found = FindSiblingBinary(
      location, "worker/worker", "//worker:worker", "worker_binary");
  EXPECT_TRUE(absl::IsNotFound(found.status()));
  EXPECT_THAT(found.status().message(),
              HasSubstr(dir + "/launch.runfiles/paramserver/worker/worker"));
  EXPECT_THAT(found.status().message(),
              HasSubstr("bazel build //worker:worker"));
  EXPECT_THAT(found.status().message(), HasSubstr("--worker_binary"));
}

TEST(BinaryLocatorTest, ChecksExplicitBinaries) {
  const std::string dir = TestDir("explicit");
  MakeFile(dir + "/tool", false);
  EXPECT_TRUE(CheckExecutable("server_binary", "/bin/sh").ok());
  const absl::Status status = CheckExecutable("server_binary", dir + "/tool");
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(), HasSubstr("--server_binary="));
  EXPECT_FALSE(CheckExecutable("server_binary", dir).ok());
}

TEST(BinaryLocatorTest, ResolvesUserPathsAgainstTheBazelRunDirectory) {
  EXPECT_EQ(ResolveUserPath("bazel-bin/x", "/home/me/ws"),
            "/home/me/ws/bazel-bin/x");
  EXPECT_EQ(ResolveUserPath("/abs/x", "/home/me/ws"), "/abs/x");
  EXPECT_EQ(ResolveUserPath("rel/x", ""), "rel/x");
  EXPECT_EQ(ResolveUserPath("", "/home/me/ws"), "");
}

}  // namespace
}  // namespace ps
