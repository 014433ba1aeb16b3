#include "deploy/local/allreduce_mode.h"

#include <string>
#include <utility>
#include <vector>

#include "deploy/local/launch_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

LaunchConfig AllreduceConfig() {
  LaunchConfig config;
  config.server_binary = "/root/bin/server/server";
  config.worker_binary = "/root/bin/worker/worker";
  config.mode = "allreduce";
  config.num_workers = 3;
  return config;
}

TEST(AllreduceModeTest, IsAValidMode) {
  EXPECT_TRUE(ValidateLaunchConfig(AllreduceConfig()).ok());
  EXPECT_TRUE(IsAllreduce(AllreduceConfig()));
  EXPECT_FALSE(IsAllreduce(LaunchConfig()));
}

TEST(AllreduceModeTest, RefusesWhatTheModeCannotDo) {
  LaunchConfig auth = AllreduceConfig();
  auth.auth.server_cert = "/tmp/cert.pem";
  EXPECT_THAT(ValidateLaunchConfig(auth).message(), HasSubstr("--auth"));
  LaunchConfig staleness = AllreduceConfig();
  staleness.staleness = 2;
  EXPECT_THAT(ValidateLaunchConfig(staleness).message(),
              HasSubstr("--staleness"));
  LaunchConfig server_flag = AllreduceConfig();
  server_flag.extra_server_flags = {"--worker_timeout=5s"};
  EXPECT_THAT(ValidateLaunchConfig(server_flag).message(),
              HasSubstr("--worker_timeout=5s"));
}

TEST(AllreduceModeTest, StartsTheCoordinatorInPlaceOfTheServers) {
  LaunchConfig config = AllreduceConfig();
  config.job_id = "job-1";
  const std::vector<std::string> argv = ServerArgv(config, 0, "/tmp/p", 0);
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(argv[0], "/root/bin/allreduce/coordinator");
  EXPECT_THAT(argv, Contains("--num_workers=3"));
  EXPECT_THAT(argv, Contains("--port_file=/tmp/p"));
  EXPECT_THAT(argv, Contains("--job_id=job-1"));
  const ClusterSpec spec = MakeClusterSpec(config);
  EXPECT_EQ(spec.num_servers, 1);
  EXPECT_TRUE(spec.stop_servers_after_workers);
}

TEST(AllreduceModeTest, WorkersTakeTheUpdateFlagsTheServersWouldHave) {
  LaunchConfig config = AllreduceConfig();
  config.optimizer = "sgd";
  config.learning_rate = 0.25;
  config.lr_schedule = "cosine";
  config.extra_server_flags = {"--momentum=0"};
  const std::vector<std::string> argv =
      WorkerArgv(config, 1, {"127.0.0.1:5000"});
  EXPECT_THAT(argv, Contains("--mode=allreduce"));
  EXPECT_THAT(argv, Contains("--servers=127.0.0.1:5000"));
  EXPECT_THAT(argv, Contains("--optimizer=sgd"));
  EXPECT_THAT(argv, Contains("--learning_rate=0.25"));
  EXPECT_THAT(argv, Contains("--lr_schedule=cosine"));
  EXPECT_THAT(argv, Contains("--momentum=0"));
  EXPECT_THAT(argv, Contains("--allreduce_host=127.0.0.1"));
  EXPECT_THAT(argv, Not(Contains(HasSubstr("--checkpoint_dir"))));
  config.checkpoint_dir = "/tmp/run/checkpoints";
  EXPECT_THAT(WorkerArgv(config, 0, {"127.0.0.1:5000"}),
              Contains("--checkpoint_dir=/tmp/run/checkpoints"));
  // Not in the other modes: the servers take them there.
  LaunchConfig sync = config;
  sync.mode = "sync";
  sync.extra_server_flags.clear();
  EXPECT_THAT(WorkerArgv(sync, 1, {"127.0.0.1:5000"}),
              Not(Contains("--optimizer=sgd")));
}

TEST(AllreduceModeTest, AProgramIsToldToJoinTheRing) {
  LaunchConfig config = AllreduceConfig();
  config.program = {"python3", "train.py"};
  ASSERT_TRUE(ValidateLaunchConfig(config).ok());
  using Variable = std::pair<std::string, std::string>;
  std::vector<Variable> env = WorkerEnv(config, 1, {"127.0.0.1:5000"});
  EXPECT_THAT(env, Contains(Variable("PS_MODE", "allreduce")));
  EXPECT_THAT(env, Contains(Variable("PS_SERVERS", "127.0.0.1:5000")));
  EXPECT_THAT(env, Contains(Variable("PS_ALLREDUCE_HOST", "127.0.0.1")));
  EXPECT_THAT(env, Not(Contains(::testing::Key("PS_CHECKPOINT_DIR"))));
  config.checkpoint_dir = "/tmp/run/checkpoints";
  EXPECT_THAT(WorkerEnv(config, 0, {"127.0.0.1:5000"}),
              Contains(Variable("PS_CHECKPOINT_DIR", "/tmp/run/checkpoints")));
  // Not in the other modes.
  config.mode = "sync";
  EXPECT_THAT(WorkerEnv(config, 0, {"127.0.0.1:5000"}),
              Not(Contains(::testing::Key("PS_MODE"))));
}

TEST(AllreduceModeTest, OnSeveralHostsOneCoordinatorRunsOnHostZero) {
  LaunchConfig config = AllreduceConfig();
  config.num_servers = 2;
  EXPECT_THAT(PlaceAllreduceOnHosts(2, &config).message(),
              HasSubstr("--server_hosts"));
  ASSERT_TRUE(PlaceAllreduceOnHosts(0, &config).ok());
  EXPECT_EQ(config.num_servers, 1);
  // What HostSession::Apply gives host 1 of 2: no coordinator, its own
  // address for the ring.
  config.server_host = "10.0.0.2";
  config.host_servers = 0;
  config.first_rank = 2;
  EXPECT_EQ(MakeClusterSpec(config).num_servers, 0);
  EXPECT_THAT(WorkerArgv(config, 2, {"10.0.0.1:5000"}),
              Contains("--allreduce_host=10.0.0.2"));
  config.program = {"python3", "train.py"};
  EXPECT_THAT(WorkerEnv(config, 2, {"10.0.0.1:5000"}),
              Contains(std::pair<std::string, std::string>("PS_ALLREDUCE_HOST",
                                                           "10.0.0.2")));
  // Host 0: the coordinator, on its advertised address.
  config.server_host = "10.0.0.1";
  config.host_servers = 1;
  EXPECT_EQ(MakeClusterSpec(config).num_servers, 1);
  EXPECT_THAT(ServerArgv(config, 0, "/tmp/p", 0), Contains("--host=10.0.0.1"));
}

TEST(AllreduceModeTest, CoordinatorLivesBesideTheServer) {
  EXPECT_EQ(CoordinatorBinary("/a/b/server/server"),
            "/a/b/allreduce/coordinator");
}

}  // namespace
}  // namespace ps
