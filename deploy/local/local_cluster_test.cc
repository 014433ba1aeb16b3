#include "deploy/local/local_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/exit_codes.h"
#include "deploy/local/local_cluster_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(LocalClusterTest, SucceedsWhenAllWorkersSucceed) {
  Output output;
  const std::string done = DoneDir("all_succeed");
  LocalCluster cluster(
      ShellCluster(2, {ServerUntilDone(done, 2)}, 2,
                   {WorkerThenDone(done,
                                   "echo servers $1; echo 'final test "
                                   "accuracy: 0.8912'"),
                    WorkerThenDone(done, "echo servers $1")}),
      output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.ExitCode(), 0);
  ASSERT_TRUE(result.final_test_accuracy.has_value());
  EXPECT_DOUBLE_EQ(*result.final_test_accuracy, 0.8912);
  ASSERT_EQ(result.processes.size(), 4u);
  for (const ProcessOutcome& process : result.processes) {
    ASSERT_TRUE(process.exit.has_value()) << process.name;
    EXPECT_TRUE(process.exit->success()) << process.name;
    EXPECT_FALSE(process.stopped_by_launcher) << process.name;
  }
  const std::vector<std::string> lines = output.lines();
  EXPECT_THAT(lines, Contains("[server 1] serving"));
  EXPECT_THAT(lines,
              Contains("[worker 0] servers 127.0.0.1:4000,127.0.0.1:4001"));
  EXPECT_THAT(lines,
              Contains("[worker 1] servers 127.0.0.1:4000,127.0.0.1:4001"));
  EXPECT_THAT(lines, Contains("[launch] server 1 listening on 127.0.0.1:4001"));
}

TEST(LocalClusterTest, AccuracyFromOtherWorkersIsIgnored) {
  Output output;
  const std::string done = DoneDir("other_accuracy");
  LocalCluster cluster(
      ShellCluster(1, {ServerUntilDone(done, 2)}, 2,
                   {WorkerThenDone(done, "true"),
                    WorkerThenDone(done, "echo 'final test accuracy: 0.5'")}),
      output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_FALSE(result.final_test_accuracy.has_value());
}

TEST(LocalClusterTest, FailingWorkerStopsTheOthersAndIsNamed) {
  Output output;
  // Worker 1 fails only once worker 2 runs: the launcher starts no worker
  // after a failure, and a fast exit may beat the start of the next.
  const std::string started = DoneDir("failing_worker");
  LocalCluster cluster(
      ShellCluster(2, {ServerScript("exec sleep 1000")}, 3,
                   {"exec sleep 1000",
                    absl::StrCat("while [ ! -e ", started,
                                 "/2 ]; do sleep 0.02; done; echo loading; "
                                 "echo 'error: bad batch'; exit 3"),
                    absl::StrCat("touch ", started, "/$2; exec sleep 1000")}),
      output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(absl::IsAborted(result.status)) << result.status;
  EXPECT_EQ(result.status.message(),
            "worker 1 exited with code 3: error: bad batch");
  EXPECT_EQ(result.ExitCode(), 1);
  // Well under kill_grace (60 s): SIGTERM stopped the others, no SIGKILL
  // escalation was waited for.
  EXPECT_LT(result.elapsed, absl::Seconds(30));
  for (const char* name : {"server 0", "server 1", "worker 0", "worker 2"}) {
    const ProcessOutcome& process = Find(result, name);
    EXPECT_TRUE(process.stopped_by_launcher) << name;
    EXPECT_EQ(process.exit, ExitStatus::Signaled(SIGTERM)) << name;
  }
  EXPECT_FALSE(Find(result, "worker 1").stopped_by_launcher);
}

TEST(LocalClusterTest, NamesWorkerKilledBySignal) {
  Output output;
  LocalCluster cluster(
      ShellCluster(1, {ServerScript("exec sleep 1000")}, 1, {"kill -9 $$"}),
      output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.status.message(),
            "worker 0 killed by signal 9 (SIGKILL) (no output)");
}

TEST(LocalClusterTest, NamesTheProcessThatCannotStart) {
  Output output;
  ClusterSpec spec = ShellCluster(1, {"true"}, 1, {"true"});
  spec.server_command = [](int, int, const std::string&) {
    return std::vector<std::string>{"/nonexistent/server"};
  };
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(absl::IsNotFound(result.status)) << result.status;
  EXPECT_THAT(result.status.message(),
              HasSubstr("cannot start server 0: cannot start "
                        "'/nonexistent/server'"));
}

TEST(LocalClusterTest, StopRequestIsForwardedToEveryProcess) {
  Output output;
  LocalCluster cluster(ShellCluster(2, {ServerScript("exec sleep 1000")}, 2,
                                    {"echo ready; exec sleep 1000"}),
                       output.writer());
  output.OnLine([&cluster](absl::string_view line) {
    if (line == "[worker 1] ready") cluster.RequestStop(SIGINT);
  });
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(absl::IsCancelled(result.status)) << result.status;
  EXPECT_EQ(result.stop_signal, SIGINT);
  EXPECT_EQ(result.ExitCode(), 128 + SIGINT);
  for (const ProcessOutcome& process : result.processes) {
    EXPECT_EQ(process.exit, ExitStatus::Signaled(SIGINT)) << process.name;
    EXPECT_TRUE(process.stopped_by_launcher) << process.name;
  }
}

TEST(LocalClusterTest, SecondStopRequestKillsAtOnce) {
  Output output;
  ClusterSpec spec = ShellCluster(1, {ServerScript("exec sleep 1000")}, 1,
                                  {"trap '' INT TERM; echo ready; sleep 1000"});
  spec.kill_grace = absl::Seconds(60);
  LocalCluster cluster(std::move(spec), output.writer());
  output.OnLine([&cluster](absl::string_view line) {
    if (line == "[worker 0] ready") {
      cluster.RequestStop(SIGTERM);
      cluster.RequestStop(SIGTERM);
    }
  });
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.stop_signal, SIGTERM);
  // Well under kill_grace (60 s): the second request did not wait it out.
  EXPECT_LT(result.elapsed, absl::Seconds(30));
  EXPECT_EQ(Find(result, "worker 0").exit, ExitStatus::Signaled(SIGKILL));
}

TEST(LocalClusterTest, WorkerProgramsGetTheirEnvironmentThenServersStop) {
  Output output;
  // Servers that never exit on their own, as with a program that never
  // tells them it is done.
  ClusterSpec spec = ShellCluster(2, {ServerScript("exec sleep 1000")}, 2,
                                  {"echo \"rank $PS_RANK of $PS_SERVERS\""});
  spec.worker_environment = [](int rank,
                               const std::vector<std::string>& servers) {
    return std::vector<std::pair<std::string, std::string>>{
        {"PS_RANK", absl::StrCat(rank)},
        {"PS_SERVERS", absl::StrJoin(servers, ",")}};
  };
  spec.stop_servers_after_workers = true;
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.ExitCode(), 0);
  for (int rank : {0, 1}) {
    EXPECT_THAT(output.lines(),
                Contains(absl::StrCat("[worker ", rank, "] rank ", rank,
                                      " of 127.0.0.1:4000,127.0.0.1:4001")));
  }
  for (const char* name : {"server 0", "server 1"}) {
    EXPECT_TRUE(Find(result, name).stopped_by_launcher) << name;
  }
  // Well under shutdown_timeout (60 s): the servers were not waited for.
  EXPECT_LT(result.elapsed, absl::Seconds(30));
  EXPECT_TRUE(result.notes.empty());
}

TEST(LocalClusterTest, IgnoredStopSignalIsFollowedBySigkill) {
  Output output;
  // The trap comes before the port file: the launcher may send SIGTERM as
  // soon as the port file is there.
  ClusterSpec spec = ShellCluster(
      1, {absl::StrCat("trap '' TERM; ", ServerScript("sleep 1000"))}, 1,
      {"echo 'error: failing'; exit 2"});
  spec.kill_grace = absl::Milliseconds(200);
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.status.message(),
            "worker 0 exited with code 2: error: failing");
  EXPECT_EQ(Find(result, "server 0").exit, ExitStatus::Signaled(SIGKILL));
  // Only a safety limit: the server was killed, not left to its sleep 1000.
  EXPECT_LT(result.elapsed, absl::Seconds(30));
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(LocalClusterTest, FailedWorkerIsRestartedAndServerGetsItsPortBack) {
  Output output;
  const std::string done = DoneDir("restart_done");
  // Worker 1 dies by SIGKILL on its first start only; server 0 dies once,
  // and its restart must be given its port.
  const std::string marker =
      absl::StrCat(done, "/../restart_marker.", getpid());
  const std::string server_marker = marker + ".server";
  ClusterSpec spec = ShellCluster(
      1,
      {ServerScript(absl::StrCat(
          // Dies once, while the workers run (worker 1 made its marker);
          // back, it says so, and which port it was given.
          "until [ -e ", marker, " ]; do sleep 0.02; done; if [ ! -e ",
          server_marker, " ]; then touch ", server_marker,
          "; kill -9 $$; fi; echo \"port $3\"; touch ", server_marker,
          ".back; while [ $(ls ", done,
          " | wc -l) -lt 2 ]; do sleep 0.02; done"))},
      2,
      {WorkerThenDone(done, "true"),
       // Dies on its first start; restarted, waits for the server's restart.
       WorkerThenDone(
           done, absl::StrCat("if [ ! -e ", marker, " ]; then touch ", marker,
                              "; kill -9 $$; fi; until [ -e ", server_marker,
                              ".back ]; do sleep "
                              "0.02; done"))});
  // The stand-in server prints the port it was given ($3).
  spec.server_command = [inner = spec.server_command](
                            int index, int port, const std::string& port_file) {
    std::vector<std::string> argv = inner(index, port, port_file);
    argv.push_back(absl::StrCat(port));
    return argv;
  };
  spec.max_restarts = 2;
  spec.restart_backoff = absl::Milliseconds(10);
  spec.restart_servers = true;
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.restarts.size(), 2u);
  std::vector<std::string> names = {result.restarts[0].name,
                                    result.restarts[1].name};
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names, ::testing::ElementsAre("server 0", "worker 1"));
  for (const RestartRecord& restart : result.restarts) {
    EXPECT_THAT(restart.reason, HasSubstr("killed by signal 9"));
  }
  EXPECT_THAT(output.lines(), Contains("[server 0] port 4000"));
}

TEST(LocalClusterTest, BadConfigurationIsNotRestarted) {
  Output output;
  ClusterSpec spec = ShellCluster(1, {ServerScript("exec sleep 1000")}, 1,
                                  {"echo 'bad flag'; exit 2"});
  spec.max_restarts = 3;
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.restarts.empty());
  EXPECT_THAT(result.status.message(),
              HasSubstr("worker 0 exited with code 2: bad flag (exit code 2: "
                        "bad configuration, not restarted)"));
  EXPECT_TRUE(result.bad_configuration);
  EXPECT_EQ(result.ExitCode(), kExitBadConfig);
}

TEST(LocalClusterTest, AnotherFailureIsNotBadConfiguration) {
  Output output;
  ClusterSpec spec = ShellCluster(1, {ServerScript("exec sleep 1000")}, 1,
                                  {"echo 'lost'; exit 3"});
  spec.max_restarts = 0;
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_FALSE(result.status.ok());
  EXPECT_FALSE(result.bad_configuration);
  EXPECT_EQ(result.ExitCode(), kExitFailed);
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

// The servers exit (their workers said they were done) before a worker's
// failure is handled: a restart would find no server, and the run would
// end blaming an unreachable one; the worker's own failure ends it.
TEST(LocalClusterTest, WorkerFailingAfterTheServersExitedIsNotRestarted) {
  Output output;
  const std::string done = DoneDir("servers_gone");
  const std::string gone = absl::StrCat(done, "/../server_gone.", getpid());
  ClusterSpec spec = ShellCluster(
      1,
      {ServerScript(absl::StrCat("while [ ! -e ", done,
                                 "/done.0 ]; do sleep 0.02; done; touch ",
                                 gone))},
      2,
      {WorkerThenDone(done, "true"),
       // Fails as the server exits. Whether the launcher sees the server's
       // exit first or not, no restart may follow: the restart waits
       // (restart_backoff) and is dropped once the server is gone.
       absl::StrCat("echo started; until [ -e ", gone,
                    " ]; do sleep 0.02; done; echo 'my own failure'; exit 1")});
  spec.max_restarts = 3;
  spec.restart_backoff = absl::Minutes(1);
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.ExitCode(), kExitFailed);
  EXPECT_THAT(result.status.message(),
              HasSubstr("worker 1 exited with code 1: my own failure"));
  EXPECT_THAT(result.status.message(), HasSubstr("not restarted: every "
                                                 "server had"));
  const std::vector<std::string> lines = output.lines();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), "[worker 1] started"), 1);
}

}  // namespace
}  // namespace ps
