#include "common/process_control.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, test_count, 1, "A flag with a value, for the tests.");
ABSL_FLAG(bool, test_switch, false, "A bool flag, for the tests.");

namespace ps {
namespace {

// CheckFlagSyntax on `args` after a program name.
absl::Status Check(std::vector<std::string> args) {
  args.insert(args.begin(), "program");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return CheckFlagSyntax(static_cast<int>(argv.size()), argv.data());
}

TEST(CheckFlagSyntaxTest, AcceptsEverySpellingOfAKnownFlag) {
  EXPECT_TRUE(
      Check({"--test_count=3", "-test_count", "4", "--test_switch",
             "--notest_switch", "--test_switch=false", "positional", "--help"})
          .ok());
  EXPECT_TRUE(Check({"--", "--not_a_flag"}).ok()) << "after --: arguments";
}

TEST(CheckFlagSyntaxTest, RefusesUnknownFlagsMissingAndBadValues) {
  EXPECT_EQ(Check({"--test_cuont=3"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Check({"--notest_count"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Check({"--test_count"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Check({"--test_count=three"}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WritePortFileTest, WritesThePortAndNoTemporaryFile) {
  const std::string path = ::testing::TempDir() + "/port";
  ASSERT_TRUE(WritePortFile(path, 12345).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "12345\n");
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
  EXPECT_EQ(WritePortFile(::testing::TempDir() + "/no/such/dir/port", 1).code(),
            absl::StatusCode::kUnavailable);
}

TEST(ShutdownRequestTest, TheFirstRequestWins) {
  ShutdownRequest request;
  EXPECT_FALSE(request.requested());
  request.Request("job done", 0);
  request.RequestBySignal("signal 15", 3);
  EXPECT_TRUE(request.requested());
  const ShutdownRequest::Reason reason = request.Wait();
  EXPECT_EQ(reason.text, "job done");
  EXPECT_EQ(reason.exit_code, 0);
  EXPECT_FALSE(reason.by_signal);
}

TEST(RequestShutdownOnSignalTest, ASignalBecomesARequestBySignal) {
  // No other thread runs yet: the mask holds for the whole process.
  absl::StatusOr<std::unique_ptr<StopSignals>> signals =
      StopSignals::Install({SIGINT, SIGTERM});
  ASSERT_TRUE(signals.ok()) << signals.status();
  ShutdownRequest request;
  {
    RequestShutdownOnSignal(signals->get(), 7, &request);
    ASSERT_EQ(kill(getpid(), SIGTERM), 0);
    const ShutdownRequest::Reason reason = request.Wait();
    EXPECT_TRUE(reason.by_signal);
    EXPECT_EQ(reason.exit_code, 7);
    EXPECT_NE(reason.text.find("signal 15"), std::string::npos) << reason.text;
  }
  signals->reset();  // Stops the signals' thread before `request` goes.
}

}  // namespace
}  // namespace ps
