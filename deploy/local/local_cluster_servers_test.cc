#include <signal.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "deploy/local/local_cluster.h"
#include "deploy/local/local_cluster_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// LocalCluster's servers (local_cluster_servers.cc): started, awaited,
// refused when they fail to listen, stopped when they outstay the workers.

namespace ps {
namespace {

using ::testing::HasSubstr;

// Servers of several groups are one list to the cluster: each is started
// with its own index, and the workers get every address in index order.
TEST(LocalClusterServersTest, EveryServerListensAndWorkersGetThemInOrder) {
  Output output;
  const std::string done = DoneDir("groups");
  ClusterSpec spec =
      ShellCluster(4, {ServerUntilDone(done, 1)}, 1,
                   {WorkerThenDone(done, "echo \"servers $1\"")});
  std::vector<std::string> given;
  auto command = spec.worker_command;
  spec.worker_command = [&given, command](
                            int rank, const std::vector<std::string>& servers) {
    given = servers;
    return command(rank, servers);
  };
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(given.size(), 4u);
  for (const std::string& address : given) {
    EXPECT_THAT(address, HasSubstr("127.0.0.1:"));
  }
  for (const char* name : {"server 0", "server 1", "server 2", "server 3"}) {
    EXPECT_EQ(Find(result, name).exit, ExitStatus::Exited(0)) << name;
  }
}

TEST(LocalClusterServersTest, StopsServersThatOutstayTheShutdownTimeout) {
  Output output;
  ClusterSpec spec =
      ShellCluster(2, {ServerScript("exec sleep 1000")}, 1, {"true"});
  spec.shutdown_timeout = absl::Milliseconds(200);
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(result.status.ok()) << result.status;
  ASSERT_EQ(result.notes.size(), 1u);
  EXPECT_THAT(result.notes[0], HasSubstr("server 0, server 1 still running"));
  const ProcessOutcome& server = Find(result, "server 1");
  EXPECT_TRUE(server.stopped_by_launcher);
  EXPECT_EQ(server.exit, ExitStatus::Signaled(SIGTERM));
}

TEST(LocalClusterServersTest, ServerDyingAtStartupIsNamedAndNoWorkerStarts) {
  Output output;
  LocalCluster cluster(ShellCluster(2,
                                    {ServerScript("exec sleep 1000"),
                                     "echo 'fatal: cannot bind'; exit 7"},
                                    2, {"true"}),
                       output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_EQ(result.status.message(),
            "server 1 exited with code 7 before the workers started: fatal: "
            "cannot bind");
  EXPECT_FALSE(Find(result, "worker 0").exit.has_value());
  EXPECT_EQ(Find(result, "server 0").exit, ExitStatus::Signaled(SIGTERM));
}

TEST(LocalClusterServersTest, FailsWhenServersWriteNoPortFile) {
  Output output;
  ClusterSpec spec = ShellCluster(2, {"exec sleep 1000"}, 1, {"true"});
  spec.startup_timeout = absl::Milliseconds(200);
  LocalCluster cluster(std::move(spec), output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(absl::IsDeadlineExceeded(result.status)) << result.status;
  EXPECT_THAT(result.status.message(),
              HasSubstr("server 0, 1 did not write a port file within"));
}

TEST(LocalClusterServersTest, RejectsMalformedPortFile) {
  Output output;
  LocalCluster cluster(
      ShellCluster(
          1,
          {"echo junk > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"; exec sleep 1000"},
          1, {"true"}),
      output.writer());
  const ClusterResult result = cluster.Run();
  EXPECT_TRUE(absl::IsInvalidArgument(result.status)) << result.status;
  EXPECT_THAT(result.status.message(), HasSubstr("server 0: "));
  EXPECT_THAT(result.status.message(), HasSubstr("junk"));
}

}  // namespace
}  // namespace ps
