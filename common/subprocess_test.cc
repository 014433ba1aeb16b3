#include "common/subprocess.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// How long a test waits for what a child does at once: a safety limit only,
// since a loaded CI machine may be slow to run the child.
constexpr absl::Duration kChildTimeout = absl::Seconds(60);

SubprocessOptions Shell(const std::string& script) {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.name = "test child";
  // These children's output ends when they do: how fast a loaded machine
  // runs the reader thread must not decide whether the last lines are kept.
  options.output_drain_timeout = kChildTimeout;
  return options;
}

std::unique_ptr<Subprocess> StartOrDie(SubprocessOptions options) {
  absl::StatusOr<std::unique_ptr<Subprocess>> process =
      Subprocess::Start(std::move(options));
  EXPECT_TRUE(process.ok()) << process.status();
  return process.ok() ? *std::move(process) : nullptr;
}

// True once `pid` no longer runs: gone, or a zombie nobody reaped yet (a
// container's pid 1 may never reap orphans).
bool ProcessIsGone(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return true;
  std::string content((std::istreambuf_iterator<char>(stat)),
                      std::istreambuf_iterator<char>());
  const size_t paren = content.rfind(')');
  if (paren == std::string::npos || paren + 2 >= content.size()) return true;
  const char state = content[paren + 2];
  return state == 'Z' || state == 'X';
}

bool EventuallyGone(pid_t pid) {
  const absl::Time deadline = absl::Now() + kChildTimeout;
  while (absl::Now() < deadline) {
    if (ProcessIsGone(pid)) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, ".", getpid());
}

TEST(ExitStatusTest, DescribesCodesAndSignals) {
  EXPECT_EQ(ExitStatus::Exited(3).ToString(), "exited with code 3");
  EXPECT_EQ(ExitStatus::Signaled(9).ToString(), "killed by signal 9 (SIGKILL)");
  EXPECT_TRUE(ExitStatus::Exited(0).success());
  EXPECT_FALSE(ExitStatus::Exited(1).success());
  EXPECT_FALSE(ExitStatus::Signaled(15).success());
}

TEST(SubprocessTest, ReportsExitCode) {
  auto child = StartOrDie(Shell("exit 3"));
  const ExitStatus status = child->Wait();
  EXPECT_TRUE(status.exited());
  EXPECT_EQ(status.exit_code(), 3);
  EXPECT_EQ(status.ToString(), "exited with code 3");
}

TEST(SubprocessTest, ReportsKillingSignal) {
  auto child = StartOrDie(Shell("kill -9 $$"));
  const ExitStatus status = child->Wait();
  EXPECT_TRUE(status.signaled());
  EXPECT_EQ(status.signal(), SIGKILL);
  EXPECT_EQ(status.ToString(), "killed by signal 9 (SIGKILL)");
}

TEST(SubprocessTest, WaitForTimesOutWhileChildRuns) {
  auto child = StartOrDie(Shell("sleep 1000"));
  EXPECT_FALSE(child->WaitFor(absl::Milliseconds(50)).has_value());
  EXPECT_FALSE(child->TryWait().has_value());
}

TEST(SubprocessTest, KillDeliversSignal) {
  auto child = StartOrDie(Shell("sleep 1000"));
  ASSERT_TRUE(child->Kill(SIGTERM).ok());
  EXPECT_EQ(child->Wait(), ExitStatus::Signaled(SIGTERM));
  // Signalling an exited child is not an error.
  EXPECT_TRUE(child->Kill(SIGTERM).ok());
}

TEST(SubprocessTest, ChildDoesNotInheritBlockedSignals) {
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  auto child = StartOrDie(Shell("exec sleep 1000"));
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
  ASSERT_TRUE(child->Kill(SIGTERM).ok());
  EXPECT_EQ(child->Wait(), ExitStatus::Signaled(SIGTERM));
}

TEST(SubprocessTest, DestructorKillsChild) {
  SubprocessOptions options = Shell("exec sleep 1000");
  options.kill_grace = absl::Seconds(60);
  auto child = StartOrDie(std::move(options));
  const pid_t pid = child->pid();
  const absl::Time start = absl::Now();
  child.reset();
  // Well under kill_grace: SIGTERM ended it, not the escalation to SIGKILL.
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_TRUE(EventuallyGone(pid));
}

TEST(SubprocessTest, DestructorKillsGrandchildren) {
  auto child = StartOrDie(Shell("sleep 1000 & echo grandchild $!; wait"));
  absl::StatusOr<std::string> line =
      child->WaitForOutputLine("grandchild", kChildTimeout);
  ASSERT_TRUE(line.ok()) << line.status();
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(line->substr(line->find(' ') + 1), &grandchild));
  child.reset();
  EXPECT_TRUE(EventuallyGone(grandchild));
}

TEST(SubprocessTest, DestructorEscalatesToSigkill) {
  SubprocessOptions options = Shell("trap '' TERM; echo ready; sleep 1000");
  options.kill_grace = absl::Milliseconds(100);
  auto child = StartOrDie(std::move(options));
  ASSERT_TRUE(child->WaitForOutputLine("ready", kChildTimeout).ok());
  const pid_t pid = child->pid();
  EXPECT_EQ(child->Terminate(absl::Milliseconds(100)),
            ExitStatus::Signaled(SIGKILL));
  child.reset();
  EXPECT_TRUE(EventuallyGone(pid));
}

TEST(SubprocessTest, CapturesStdoutAndStderrAsLines) {
  absl::Mutex mu;
  std::vector<std::string> seen;
  SubprocessOptions options =
      Shell("echo one; echo two >&2; printf 'three\\r\\n'; printf partial");
  options.line_callback = [&](absl::string_view line) {
    absl::MutexLock lock(&mu);
    seen.emplace_back(line);
  };
  auto child = StartOrDie(std::move(options));
  EXPECT_TRUE(child->Wait().success());
  EXPECT_THAT(child->OutputLines(),
              ElementsAre("one", "two", "three", "partial"));
  EXPECT_EQ(child->LastLines(2), "three\npartial");
  absl::MutexLock lock(&mu);
  EXPECT_THAT(seen, ElementsAre("one", "two", "three", "partial"));
}

TEST(SubprocessTest, KeepsOnlyTheLastLinesAndSplitsLongOnes) {
  SubprocessOptions options =
      Shell("for i in 1 2 3 4 5; do echo line$i; done; printf abcdefghij");
  options.max_kept_lines = 3;
  options.max_line_bytes = 4;
  auto child = StartOrDie(std::move(options));
  EXPECT_TRUE(child->Wait().success());
  EXPECT_THAT(child->OutputLines(), ElementsAre("abcd", "efgh", "ij"));
}

TEST(SubprocessTest, ExitCallbackRunsAfterTheLastLine) {
  absl::Mutex mu;
  std::string last_line;
  std::optional<ExitStatus> status_seen;
  std::string last_line_at_exit;
  SubprocessOptions options = Shell("echo first; echo last words; exit 4");
  options.line_callback = [&](absl::string_view line) {
    absl::MutexLock lock(&mu);
    last_line = std::string(line);
  };
  options.exit_callback = [&](const ExitStatus& status) {
    absl::MutexLock lock(&mu);
    status_seen = status;
    last_line_at_exit = last_line;
  };
  auto child = StartOrDie(std::move(options));
  EXPECT_EQ(child->Wait(), ExitStatus::Exited(4));
  child.reset();  // Joins the thread running the callback.
  absl::MutexLock lock(&mu);
  EXPECT_EQ(status_seen, ExitStatus::Exited(4));
  EXPECT_EQ(last_line_at_exit, "last words");
}

TEST(SubprocessTest, InheritedOutputIsNotCaptured) {
  SubprocessOptions options = Shell("echo to the test log");
  options.capture_output = false;
  auto child = StartOrDie(std::move(options));
  EXPECT_TRUE(child->Wait().success());
  EXPECT_TRUE(child->OutputLines().empty());
}

TEST(SubprocessTest, PassesEnvironmentAndWorkingDirectory) {
  SubprocessOptions options = Shell("echo \"$PS_TEST_VAR\"; pwd");
  options.env = {{"PS_TEST_VAR", "hello world"}};
  options.working_dir = "/";
  auto child = StartOrDie(std::move(options));
  EXPECT_TRUE(child->Wait().success());
  EXPECT_THAT(child->OutputLines(), ElementsAre("hello world", "/"));
}

TEST(SubprocessTest, FindsProgramInPath) {
  SubprocessOptions options;
  options.argv = {"sh", "-c", "exit 5"};
  auto child = StartOrDie(std::move(options));
  EXPECT_EQ(child->Wait(), ExitStatus::Exited(5));
  EXPECT_EQ(child->name(), "sh");
}

TEST(SubprocessTest, RejectsMissingProgram) {
  SubprocessOptions options;
  options.argv = {"/nonexistent/program", "--flag"};
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Start(std::move(options));
  ASSERT_FALSE(child.ok());
  EXPECT_TRUE(absl::IsNotFound(child.status())) << child.status();
  EXPECT_THAT(child.status().message(), HasSubstr("/nonexistent/program"));
}

TEST(SubprocessTest, RejectsEmptyArgvAndBadEnvironment) {
  EXPECT_TRUE(
      absl::IsInvalidArgument(Subprocess::Start(SubprocessOptions{}).status()));
  SubprocessOptions options = Shell("true");
  options.env = {{"A=B", "c"}};
  EXPECT_TRUE(
      absl::IsInvalidArgument(Subprocess::Start(std::move(options)).status()));
}

TEST(SubprocessTest, WaitForOutputLineFailsWhenOutputEnds) {
  auto child = StartOrDie(Shell("echo something else"));
  absl::StatusOr<std::string> line =
      child->WaitForOutputLine("listening", kChildTimeout);
  EXPECT_TRUE(absl::IsFailedPrecondition(line.status())) << line.status();
}

TEST(SubprocessTest, WaitForOutputLineTimesOut) {
  auto child = StartOrDie(Shell("sleep 1000"));
  absl::StatusOr<std::string> line =
      child->WaitForOutputLine("listening", absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(line.status())) << line.status();
}

TEST(PortFileTest, ParsesPortsAndRejectsJunk) {
  EXPECT_EQ(*ParsePort("8080"), 8080);
  EXPECT_EQ(*ParsePort(" 65535\n"), 65535);
  for (const char* bad :
       {"", "\n", "abc", "0", "65536", "-1", "+80", "80x", "80 81"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParsePort(bad).status())) << bad;
  }
}

TEST(PortFileTest, ReadReportsMissingAndMalformedFiles) {
  const std::string path = TempPath("read_port");
  unlink(path.c_str());
  EXPECT_TRUE(absl::IsNotFound(ReadPortFile(path).status()));
  std::ofstream(path) << "not a port\n";
  absl::StatusOr<int> port = ReadPortFile(path);
  EXPECT_TRUE(absl::IsInvalidArgument(port.status()));
  EXPECT_THAT(port.status().message(), HasSubstr(path));
  std::ofstream(path) << std::string(100, '1');
  EXPECT_TRUE(absl::IsInvalidArgument(ReadPortFile(path).status()));
  unlink(path.c_str());
}

TEST(PortFileTest, WaitsForAFileWrittenLater) {
  const std::string path = TempPath("later_port");
  unlink(path.c_str());
  auto child = StartOrDie(
      Shell(absl::StrCat("sleep 0.2; echo 4321 > ", path, ".tmp; mv ", path,
                         ".tmp ", path, "; sleep 1000")));
  absl::StatusOr<int> port = WaitForPortFile(path, kChildTimeout, child.get());
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 4321);
  unlink(path.c_str());
}

TEST(PortFileTest, NamesTheChildThatDiedBeforeWritingIt) {
  const std::string path = TempPath("dead_port");
  unlink(path.c_str());
  auto child = StartOrDie(Shell("echo 'fatal: cannot bind'; exit 4"));
  absl::StatusOr<int> port = WaitForPortFile(path, kChildTimeout, child.get());
  ASSERT_TRUE(absl::IsFailedPrecondition(port.status())) << port.status();
  EXPECT_THAT(port.status().message(), HasSubstr("test child"));
  EXPECT_THAT(port.status().message(), HasSubstr("exited with code 4"));
  EXPECT_THAT(port.status().message(), HasSubstr("fatal: cannot bind"));
}

TEST(PortFileTest, TimesOutWhenNeverWritten) {
  const std::string path = TempPath("never_port");
  unlink(path.c_str());
  absl::StatusOr<int> port = WaitForPortFile(path, absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(port.status())) << port.status();
  EXPECT_THAT(port.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace ps
