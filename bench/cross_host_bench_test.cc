// The cross-host bench runs once at a tiny size on test hosts and prints a
// row whose every figure is positive (no speed is asserted). Skips where
// test hosts or iperf3 are not available.

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/hosts/test_hosts.h"

namespace ps::bench {
namespace {

// Bounds a hang only.
constexpr absl::Duration kTimeout = absl::Seconds(180);

std::string Runfile(const std::string& relative) {
  const char* dir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(dir != nullptr ? dir : ".", "/",
                      workspace != nullptr ? workspace : "paramserver", "/",
                      relative);
}

TEST(CrossHostBenchTest, EveryFigureOfARowIsPositive) {
  if (const std::string why = testing::TestHosts::WhyUnavailable();
      !why.empty()) {
    GTEST_SKIP() << "no test hosts on this machine: " << why;
  }
  if (!testing::RunCommand({"iperf3", "--version"}, kTimeout).ok()) {
    GTEST_SKIP() << "no iperf3 (scripts/install_deps.sh installs it)";
  }
  absl::StatusOr<std::string> out = testing::RunCommand(
      {Runfile("bench/cross_host_bench"),
       "--server_binary=" + Runfile("server/server"), "--sizes=4K",
       "--servers=2", "--rates_mbit=1000", "--runs=1", "--min_time_ms=0",
       "--iperf3_seconds=1", "--compression=none,bf16",
       "--transports=grpc,tcp"},
      kTimeout);
  ASSERT_TRUE(out.ok()) << out.status();
  int rows = 0;
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    if (!absl::StartsWith(line, "none ") && !absl::StartsWith(line, "bf16 ")) {
      continue;
    }
    ++rows;
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    // wire, route, link, size (2 words), shards, then the figures.
    ASSERT_EQ(words.size(), 19u) << line;
    EXPECT_EQ(words[1], rows % 2 == 1 ? "grpc" : "tcp") << line;
    EXPECT_EQ(words[2], "1G") << line;
    EXPECT_EQ(words[5], "2") << line;
    for (size_t i = 6; i < words.size(); ++i) {
      double value = 0;
      ASSERT_TRUE(absl::SimpleAtod(words[i], &value)) << line;
      EXPECT_GT(value, 0) << "column " << i << " of " << line;
    }
  }
  EXPECT_EQ(rows, 4) << *out;
}

}  // namespace
}  // namespace ps::bench
