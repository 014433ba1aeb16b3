// The same `launch` on each test host, joined through host 0's rendezvous
// (deploy/local/multi_host_launch.h): the main job, cut short, with server
// shards beside the workers and on hosts of their own, and a host whose
// launcher is SIGKILLed mid-run, which host 0 reports by name (and host 0
// killed, which the others report). Results are
// read from host 0's run directory (run.txt) and the exit codes.
// Skips (saying why) where network namespaces cannot be made.

#include <signal.h>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "common/exit_codes.h"
#include "common/subprocess.h"
#include "deploy/local/run_directory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster_runner.h"
#include "tests/hosts/host_launcher.h"
#include "tests/hosts/skip_without_hosts.h"
#include "tests/hosts/test_hosts.h"
#include "update/checkpoint.h"

namespace ps::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kGbit = 1000 * 1000 * 1000;
// Bounds a hang only: each job takes seconds.
constexpr absl::Duration kTimeout = absl::Seconds(400);

RunRecord ReadRun(const std::string& run_dir) {
  std::ifstream in(absl::StrCat(run_dir, "/run.txt"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<RunRecord> record = ParseRunRecord(text.str());
  EXPECT_TRUE(record.ok()) << run_dir << ": " << record.status();
  return record.ok() ? *record : RunRecord{};
}

double AccuracyOf(const RunRecord& record) {
  constexpr absl::string_view kPrefix = "final test accuracy ";
  double value = 0;
  if (!absl::StartsWith(record.outcome, kPrefix) ||
      !absl::SimpleAtod(record.outcome.substr(kPrefix.size()), &value)) {
    ADD_FAILURE() << "no accuracy in the outcome '" << record.outcome << "'";
  }
  return value;
}

// Runs the short job on every host; returns each host's run directory.
std::vector<std::string> RunJob(const TestHosts& hosts,
                                std::vector<std::string> extra,
                                const std::string& name) {
  std::vector<std::string> run_dirs;
  std::vector<std::unique_ptr<Subprocess>> launchers;
  // Host 0 last: the others wait for its rendezvous.
  for (int host = hosts.size() - 1; host >= 0; --host) {
    run_dirs.insert(run_dirs.begin(),
                    TempPath(absl::StrCat(name, "-host", host)));
    launchers.insert(launchers.begin(),
                     StartHostLauncher(hosts, host, run_dirs.front(), extra));
    if (launchers.front() == nullptr) return {};
  }
  ExpectLaunchersSucceed(launchers, kTimeout);
  return run_dirs;
}

class MultiHostLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_WITHOUT_TEST_HOSTS(); }
};

TEST_F(MultiHostLaunchTest, ServersBesideTheWorkersOnTwoHosts) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const std::vector<std::string> run_dirs =
      RunJob(**made, {"--max_steps=40"}, "colocated");
  ASSERT_EQ(run_dirs.size(), 2u);
  const RunRecord host0 = ReadRun(run_dirs[0]);
  EXPECT_EQ(host0.state, "finished");
  EXPECT_GT(AccuracyOf(host0), 0.3);
  EXPECT_EQ(ReadRun(run_dirs[1]).state, "finished");
  // Every host ran under the job id host 0 handed out.
  EXPECT_EQ(ReadRun(run_dirs[1]).job_id, host0.job_id);
}

TEST_F(MultiHostLaunchTest, ServersOnHostsOfTheirOwn) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(4, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const std::vector<std::string> run_dirs =
      RunJob(**made, {"--max_steps=40", "--server_hosts=2"}, "own");
  ASSERT_EQ(run_dirs.size(), 4u);
  // Rank 0 ran on host 2; host 0 (servers only) has its accuracy.
  const RunRecord host0 = ReadRun(run_dirs[0]);
  EXPECT_EQ(host0.state, "finished");
  EXPECT_GT(AccuracyOf(host0), 0.3);
  for (int host = 1; host < 4; ++host) {
    EXPECT_EQ(ReadRun(run_dirs[host]).state, "finished") << host;
  }
}

TEST_F(MultiHostLaunchTest, AKilledHostsLauncherIsNamedByHostZero) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  // Long enough never to finish before the kill.
  const std::vector<std::string> extra = {"--max_steps=1000000", "--epochs=100",
                                          "--host_timeout=3s",
                                          "--max_restarts=0"};
  const std::string run0 = TempPath("killed-host0");
  std::unique_ptr<Subprocess> host1 =
      StartHostLauncher(hosts, 1, TempPath("killed-host1"), extra);
  ASSERT_NE(host1, nullptr);
  std::unique_ptr<Subprocess> host0 = StartHostLauncher(hosts, 0, run0, extra);
  ASSERT_NE(host0, nullptr);
  // Mid-run: once worker 1 has logged training steps.
  ASSERT_TRUE(host1->WaitForOutputLine("[worker 1]", kTimeout).ok());
  ASSERT_TRUE(host1->WaitForOutputLine(" step 20/", kTimeout).ok());
  ASSERT_TRUE(host1->Kill(SIGKILL).ok());

  const std::optional<ExitStatus> exit = host0->WaitFor(kTimeout);
  ASSERT_TRUE(exit.has_value()) << "host 0's launch hangs";
  EXPECT_TRUE(exit->exited());
  EXPECT_EQ(exit->exit_code(), kExitFailed);
  const RunRecord record = ReadRun(run0);
  EXPECT_EQ(record.state, "failed");
  EXPECT_THAT(record.outcome,
              StartsWith(absl::StrCat("host 1 (", hosts.address(1), ")")));
  EXPECT_THAT(record.outcome, HasSubstr("stopped answering"));
}

TEST_F(MultiHostLaunchTest, AKilledHostZeroIsNamedByTheOthers) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  const std::vector<std::string> extra = {"--max_steps=1000000", "--epochs=100",
                                          "--host_timeout=3s",
                                          "--max_restarts=0"};
  const std::string run1 = TempPath("killed0-host1");
  std::unique_ptr<Subprocess> host1 = StartHostLauncher(hosts, 1, run1, extra);
  ASSERT_NE(host1, nullptr);
  std::unique_ptr<Subprocess> host0 =
      StartHostLauncher(hosts, 0, TempPath("killed0-host0"), extra);
  ASSERT_NE(host0, nullptr);
  ASSERT_TRUE(host1->WaitForOutputLine(" step 20/", kTimeout).ok());
  ASSERT_TRUE(host0->Kill(SIGKILL).ok());

  const std::optional<ExitStatus> exit = host1->WaitFor(kTimeout);
  ASSERT_TRUE(exit.has_value()) << "host 1's launch hangs";
  EXPECT_TRUE(exit->exited());
  EXPECT_EQ(exit->exit_code(), kExitFailed);
  const RunRecord record = ReadRun(run1);
  EXPECT_EQ(record.state, "failed");
  EXPECT_THAT(record.outcome,
              StartsWith(absl::StrCat(
                  "host 0 (", hosts.address(0), "), the rendezvous at ",
                  Rendezvous(hosts), ", stopped answering")));
}

// Where the job is stopped: some steps into its 120.
constexpr int kStopAtVersion = 10;

// The version in a checkpoint's name, "shard-<i>-<version>.ckpt".
int CheckpointVersionOf(const std::string& path) {
  const size_t dash = path.rfind('-');
  int version = -1;
  if (dash == std::string::npos ||
      !absl::SimpleAtoi(
          absl::StripSuffix(absl::string_view(path).substr(dash + 1), ".ckpt"),
          &version)) {
    return -1;
  }
  return version;
}

// Starts the job on both hosts with a checkpoint every update and stops it
// (SIGINT, as Ctrl-C) once each host holds a checkpoint of its shard some
// steps in; returns the run directories.
std::vector<std::string> StartAndStop(const TestHosts& hosts,
                                      const std::string& name) {
  const std::vector<std::string> extra = {
      "--max_steps=120", "--server_flags=--checkpoint_every_steps=1"};
  std::vector<std::string> run_dirs = {TempPath(absl::StrCat(name, "-host0")),
                                       TempPath(absl::StrCat(name, "-host1"))};
  std::unique_ptr<Subprocess> host1 =
      StartHostLauncher(hosts, 1, run_dirs[1], extra);
  std::unique_ptr<Subprocess> host0 =
      StartHostLauncher(hosts, 0, run_dirs[0], extra);
  if (host0 == nullptr || host1 == nullptr) return {};
  // Shard i runs on host i (servers beside the workers).
  for (int host : {0, 1}) {
    const std::string dir = absl::StrCat(run_dirs[host], "/checkpoints");
    const absl::Time deadline = absl::Now() + kTimeout;
    while (absl::Now() < deadline) {
      absl::StatusOr<std::vector<std::string>> found =
          update::ListCheckpoints(dir, host);
      if (found.ok() && !found->empty() &&
          CheckpointVersionOf(found->front()) >= kStopAtVersion) {
        break;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  for (Subprocess* launcher : {host0.get(), host1.get()}) {
    EXPECT_EQ(kill(launcher->pid(), SIGINT), 0);
  }
  for (Subprocess* launcher : {host0.get(), host1.get()}) {
    const std::optional<ExitStatus> exit = launcher->WaitFor(kTimeout);
    EXPECT_TRUE(exit.has_value()) << launcher->name() << " still runs";
  }
  for (int host : {0, 1}) {
    EXPECT_NE(ReadRun(run_dirs[host]).state, "finished")
        << "host " << host << " finished before it was stopped";
  }
  return run_dirs;
}

TEST_F(MultiHostLaunchTest, AStoppedJobIsResumedOnEveryHostFromItsShards) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  const std::vector<std::string> run_dirs = StartAndStop(hosts, "resumed");
  ASSERT_EQ(run_dirs.size(), 2u);

  std::vector<std::unique_ptr<Subprocess>> launchers(2);
  for (int host : {1, 0}) {
    launchers[host] = ContinueHostLauncher(hosts, host, host, 0, "resume",
                                           run_dirs[host], {});
    ASSERT_NE(launchers[host], nullptr);
  }
  for (int host : {0, 1}) {
    const std::optional<ExitStatus> exit = launchers[host]->WaitFor(kTimeout);
    ASSERT_TRUE(exit.has_value()) << "host " << host << "'s resume hangs";
    EXPECT_TRUE(exit->success()) << "host " << host << " " << exit->ToString();
  }
  const RunRecord host0 = ReadRun(run_dirs[0]);
  EXPECT_EQ(host0.state, "finished");
  EXPECT_GT(AccuracyOf(host0), 0.3);
  for (int host : {0, 1}) {
    const RunRecord record = ReadRun(run_dirs[host]);
    EXPECT_EQ(record.job_id, host0.job_id) << host;
    ASSERT_EQ(record.segments.size(), 2u) << host;
    EXPECT_EQ(record.segments[1].kind, "resume") << host;
    // Its server restored its own shard: the run's checkpoints go on from
    // where they were, not from version 0.
    absl::StatusOr<std::vector<std::string>> others = update::ListCheckpoints(
        absl::StrCat(run_dirs[host], "/checkpoints"), 1 - host);
    ASSERT_TRUE(others.ok()) << others.status();
    EXPECT_TRUE(others->empty())
        << "host " << host << " wrote shard " << 1 - host << "'s checkpoints";
  }
}

// Both hosts refuse, each naming its own moved shards, and neither waits
// for the other: the first refusal reaches the other host through the
// rendezvous, whichever host gets there first (the host serving the
// rendezvous stays until every host has reported).
TEST_F(MultiHostLaunchTest, AResumeThatMovesTheShardsIsRefusedNamingThem) {
  absl::StatusOr<std::unique_ptr<TestHosts>> made = TestHosts::Create(2, kGbit);
  ASSERT_TRUE(made.ok()) << made.status();
  const TestHosts& hosts = **made;
  const std::vector<std::string> run_dirs = StartAndStop(hosts, "moved");
  ASSERT_EQ(run_dirs.size(), 2u);

  // Each host goes on with its own run directory, but under the other's
  // index: host 1 would run shard 0, whose checkpoints are on host 0.
  std::vector<std::unique_ptr<Subprocess>> launchers(2);
  for (int host : {0, 1}) {
    launchers[host] = ContinueHostLauncher(hosts, host, 1 - host, 1, "resume",
                                           run_dirs[host], {});
    ASSERT_NE(launchers[host], nullptr);
  }
  for (int host : {0, 1}) {
    const std::optional<ExitStatus> exit = launchers[host]->WaitFor(kTimeout);
    ASSERT_TRUE(exit.has_value()) << "host " << host << "'s resume hangs";
    EXPECT_EQ(exit->exit_code(), kExitBadConfig) << exit->ToString();
    EXPECT_TRUE(launchers[host]
                    ->WaitForOutputLine(
                        absl::StrCat("holds the checkpoints of shard ", host),
                        absl::ZeroDuration())
                    .ok())
        << "host " << host << ": " << launchers[host]->LastLines(10);
  }
}

}  // namespace
}  // namespace ps::testing
