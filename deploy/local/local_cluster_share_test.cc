// LocalCluster as one host of several: global indexes, the server list
// exchanged with the other hosts, a host without workers, and a failure
// elsewhere ending the run.

#include <signal.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/local_cluster_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LocalClusterShareTest, RunsItsShareUnderTheJobsIndexesAndServerList) {
  Output output;
  const std::string done = DoneDir("share");
  ClusterSpec spec = ShellCluster(1, {ServerUntilDone(done, 1)}, 1,
                                  {WorkerThenDone(done, "echo servers $1")});
  spec.first_server = 1;
  spec.first_rank = 3;
  std::vector<std::string> told;
  spec.exchange_servers = [&told](const std::vector<std::string>& local,
                                  const std::function<bool()>&) {
    told = local;
    std::vector<std::string> all = {"10.0.0.1:7"};
    all.insert(all.end(), local.begin(), local.end());
    return absl::StatusOr<std::vector<std::string>>(all);
  };
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  ASSERT_TRUE(result.status.ok()) << result.status;
  // Server 1 writes port 4001 (ServerScript: 400 and its index).
  EXPECT_THAT(told, ElementsAre("127.0.0.1:4001"));
  EXPECT_THAT(output.lines(),
              Contains("[worker 3] servers 10.0.0.1:7,127.0.0.1:4001"));
  ASSERT_EQ(result.processes.size(), 2u);
  EXPECT_EQ(result.processes[0].name, "server 1");
  EXPECT_EQ(result.processes[1].name, "worker 3");
}

TEST(LocalClusterShareTest, AFailedExchangeEndsTheRunBeforeAnyWorker) {
  Output output;
  ClusterSpec spec =
      ShellCluster(1, {ServerScript("exec sleep 1000")}, 1, {"echo ran"});
  spec.exchange_servers = [](const std::vector<std::string>&,
                             const std::function<bool()>&) {
    return absl::StatusOr<std::vector<std::string>>(
        absl::FailedPreconditionError("host 1 (10.0.0.2): boom"));
  };
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.ExitCode(), kExitFailed);
  EXPECT_THAT(result.status.message(), HasSubstr("host 1 (10.0.0.2): boom"));
  EXPECT_THAT(output.lines(), ::testing::Not(Contains("[worker 0] ran")));
}

TEST(LocalClusterShareTest, AHostWithoutWorkersIsDoneWhenItsServersExit) {
  Output output;
  const std::string done = DoneDir("server_host");
  const std::string go = absl::StrCat(done, "/../go.", getpid());
  // The server exits 0 once "the workers elsewhere" are done: here once
  // the exchange has run, so the launcher must still be waiting then.
  ClusterSpec spec = ShellCluster(
      1,
      {ServerScript(absl::StrCat("while [ ! -e ", go,
                                 " ]; do sleep 0.02; done; echo served"))},
      0, {"false"});
  spec.exchange_servers = [go](const std::vector<std::string>& local,
                               const std::function<bool()>&) {
    EXPECT_EQ(system(absl::StrCat("touch ", go).c_str()), 0);
    return absl::StatusOr<std::vector<std::string>>(local);
  };
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_THAT(output.lines(), Contains("[server 0] served"));
  ASSERT_EQ(result.processes.size(), 1u);
  ASSERT_TRUE(result.processes[0].exit.has_value());
  EXPECT_TRUE(result.processes[0].exit->success());
  EXPECT_FALSE(result.processes[0].stopped_by_launcher);
}

TEST(LocalClusterShareTest, AStopEndsTheExchangeAndIsTheResult) {
  Output output;
  ClusterSpec spec =
      ShellCluster(1, {ServerScript("exec sleep 1000")}, 1, {"echo ran"});
  LocalCluster* running = nullptr;
  // Waits for the other hosts for ever, but for the stop.
  spec.exchange_servers = [&running](const std::vector<std::string>&,
                                     const std::function<bool()>& stopped) {
    running->RequestStop(SIGINT);
    while (!stopped()) absl::SleepFor(absl::Milliseconds(10));
    return absl::StatusOr<std::vector<std::string>>(
        absl::CancelledError("stopped while waiting"));
  };
  LocalCluster cluster(std::move(spec), output.writer());
  running = &cluster;
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.ExitCode(), ExitCodeForSignal(SIGINT));
  EXPECT_THAT(output.lines(), ::testing::Not(Contains("[worker 0] ran")));
}

TEST(LocalClusterShareTest, AbortStopsTheRunWithTheReasonGiven) {
  Output output;
  ClusterSpec spec = ShellCluster(1, {ServerScript("exec sleep 1000")}, 1,
                                  {"echo training; exec sleep 1000"});
  LocalCluster cluster(std::move(spec), output.writer());
  output.OnLine([&cluster](absl::string_view line) {
    if (line == "[worker 0] training") {
      cluster.Abort("host 1 (10.0.0.2): its launcher stopped answering");
    }
  });
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.ExitCode(), kExitFailed);
  EXPECT_EQ(result.status.message(),
            "host 1 (10.0.0.2): its launcher stopped answering");
  for (const ProcessOutcome& process : result.processes) {
    EXPECT_TRUE(process.stopped_by_launcher) << process.name;
  }
}

}  // namespace
}  // namespace ps
