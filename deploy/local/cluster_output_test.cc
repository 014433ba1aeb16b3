#include "deploy/local/cluster_output.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ClusterOutputTest, SeverityFromOurPatternOrCommonMarkers) {
  EXPECT_EQ(SeverityOf("12:00:00.000 [worker 1] warning: retrying"),
            LineSeverity::kWarning);
  EXPECT_EQ(SeverityOf("12:00:00.000 [server 0] error: bad"),
            LineSeverity::kError);
  // Our info lines stay info whatever they quote.
  EXPECT_EQ(SeverityOf("12:00:00.000 [server 0] info: 0 errors: fine"),
            LineSeverity::kInfo);
  EXPECT_EQ(SeverityOf("Traceback (most recent call last):"),
            LineSeverity::kError);
  EXPECT_EQ(SeverityOf("UserWarning: deprecated"), LineSeverity::kWarning);
  EXPECT_EQ(SeverityOf("rank 0/2 ok"), LineSeverity::kInfo);
}

TEST(ClusterOutputTest, ShortProgramNameDropsBazelTrees) {
  EXPECT_EQ(ShortProgramName("/root/.cache/bazel/_bazel_root/x/execroot/"
                             "paramserver/bazel-out/k8-fastbuild/bin/deploy/"
                             "local/launch.runfiles/paramserver/server/server"),
            "server/server");
  EXPECT_EQ(ShortProgramName("/usr/bin/python3"), "/usr/bin/python3");
}

TEST(ClusterOutputTest,
     StreamedOutputPrefixesOnlyLinesThatDoNotNameThemselves) {
  std::vector<std::string> lines;
  LineWriter writer(
      [&lines](absl::string_view line) { lines.emplace_back(line); });
  StreamedOutput out(&writer);
  const ProcessId worker{false, 1};
  out.ProcessLine(worker, "12:00:00.000 [worker 1] info: hello");
  out.ProcessLine(worker, "RESULT {}");
  out.LauncherLine(LaunchLevel::kWarning, "restarting");
  EXPECT_THAT(lines, ElementsAre("12:00:00.000 [worker 1] info: hello",
                                 "[worker 1] RESULT {}",
                                 "[launch] warning: restarting"));
}

TEST(ClusterOutputTest, LogFilesKeepEveryLineOfEachProcess) {
  const std::string dir = ::ps::testing::UnusedTestPath("logs");
  std::vector<std::string> passed;
  LineWriter writer(
      [&passed](absl::string_view line) { passed.emplace_back(line); });
  StreamedOutput next(&writer);
  {
    absl::StatusOr<std::unique_ptr<LogFiles>> logs =
        LogFiles::Create(dir, &next);
    ASSERT_TRUE(logs.ok()) << logs.status();
    const ProcessId server{true, 0};
    (*logs)->ProcessStarted(server, 12, {"/bin/server", "--port=0"});
    (*logs)->ProcessLine(server, "serving");
    (*logs)->ProcessStarted(server, 13, {"/bin/server", "--port=7000"});
    (*logs)->ProcessLine(server, "serving again");
    (*logs)->LauncherLine(LaunchLevel::kDetail, "detail");
  }
  std::ifstream in(dir + "/server-0.log");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("started server 0 (pid 12): /bin/server "
                                    "--port=0\nserving\n"));
  EXPECT_THAT(text.str(), HasSubstr("(pid 13): /bin/server --port=7000\n"
                                    "serving again\n"));
  std::ifstream launch(dir + "/launch.log");
  std::stringstream launch_text;
  launch_text << launch.rdbuf();
  EXPECT_THAT(launch_text.str(), HasSubstr(" detail\n"));
  EXPECT_EQ(passed.size(), 5u);
}

}  // namespace
}  // namespace ps
