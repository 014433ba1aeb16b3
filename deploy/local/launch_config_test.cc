#include "deploy/local/launch_config.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LaunchConfig ValidConfig() {
  LaunchConfig config;
  config.server_binary = "/bin/server";
  config.worker_binary = "/bin/worker";
  return config;
}

TEST(LaunchConfigTest, DefaultsAreValid) {
  EXPECT_TRUE(ValidateLaunchConfig(ValidConfig()).ok());
}

TEST(LaunchConfigTest, RejectsBadValuesNamingTheFlag) {
  struct Case {
    std::function<void(LaunchConfig*)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](LaunchConfig* c) { c->num_servers = 0; },
       "--num_servers must be in [1, 256], got 0"},
      {[](LaunchConfig* c) { c->num_workers = -2; }, "--num_workers"},
      {[](LaunchConfig* c) { c->num_workers = 100000; }, "--num_workers"},
      {[](LaunchConfig* c) { c->epochs = 0; }, "--epochs"},
      {[](LaunchConfig* c) { c->batch_size = 0; }, "--batch_size"},
      {[](LaunchConfig* c) { c->mode = "bsp"; },
       "--mode must be one of sync|ssp|async|allreduce, got 'bsp'"},
      {[](LaunchConfig* c) { c->staleness = 3; },
       "--staleness applies only to --mode=ssp"},
      {[](LaunchConfig* c) { c->mode = "ssp"; },
       "--mode=ssp needs --staleness=N"},
      {[](LaunchConfig* c) { c->metrics_port_base = 65534; },
       "--metrics_port_base must be in [1, 65532]"},
      {[](LaunchConfig* c) { c->max_restarts = -1; }, "--max_restarts"},
      {[](LaunchConfig* c) {
         c->mode = "ssp";
         c->staleness = -1;
       },
       "--staleness"},
      {[](LaunchConfig* c) { c->optimizer = "rmsprop"; }, "--optimizer"},
      {[](LaunchConfig* c) { c->learning_rate = -0.1; }, "--learning_rate"},
      {[](LaunchConfig* c) { c->seed = -1; }, "--seed"},
      {[](LaunchConfig* c) { c->device = "tpu"; }, "--device"},
      {[](LaunchConfig* c) { c->model = "784"; }, "--model: "},
      {[](LaunchConfig* c) { c->model = "784-x-10"; }, "--model: "},
      {[](LaunchConfig* c) { c->model = "cnnx"; }, "--model: "},
      {[](LaunchConfig* c) { c->base_port = 65535; }, "--base_port"},
      {[](LaunchConfig* c) { c->base_port = -5; }, "--base_port"},
      {[](LaunchConfig* c) { c->data_dir = ""; }, "--data_dir"},
      {[](LaunchConfig* c) { c->worker_binary = ""; }, "--worker_binary"},
      {[](LaunchConfig* c) { c->startup_timeout = absl::ZeroDuration(); },
       "--startup_timeout"},
      {[](LaunchConfig* c) { c->kill_grace = absl::Seconds(-1); },
       "--kill_grace"},
  };
  for (const Case& test : cases) {
    LaunchConfig config = ValidConfig();
    test.change(&config);
    const absl::Status status = ValidateLaunchConfig(config);
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << test.message;
    EXPECT_THAT(status.message(), HasSubstr(test.message));
  }
}

TEST(LaunchConfigTest, AcceptsSspWithStalenessAndAFreeBasePort) {
  LaunchConfig config = ValidConfig();
  config.mode = "ssp";
  config.staleness = 3;
  config.num_servers = 4;
  config.base_port = 65532;
  EXPECT_TRUE(ValidateLaunchConfig(config).ok());
}

TEST(LaunchConfigTest, ServerArgvCarriesClusterAndTrainingFlags) {
  LaunchConfig config = ValidConfig();
  config.mode = "ssp";
  config.staleness = 2;
  config.optimizer = "adam";
  config.learning_rate = 0.01;
  config.extra_server_flags = {"--momentum=0.5"};
  EXPECT_THAT(
      ServerArgv(config, 1, "/tmp/d/server_1.port"),
      ElementsAre("/bin/server", "--server_index=1", "--num_servers=2",
                  "--num_workers=2", "--port=0", "--host=127.0.0.1",
                  "--port_file=/tmp/d/server_1.port", "--mode=ssp",
                  "--staleness=2", "--optimizer=adam", "--learning_rate=0.01",
                  "--lr_schedule=constant", "--momentum=0.5"));
}

TEST(LaunchConfigTest, ServersWriteTheirReportsIntoTheRunDirectory) {
  LaunchConfig config = ValidConfig();
  config.run_dir = "/tmp/run";
  EXPECT_THAT(ServerArgv(config, 1, "/p"),
              testing::Contains("--report_file=/tmp/run/logs/server-1.report"));
}

TEST(LaunchConfigTest, CheckpointDirMakesServersRestoreOnEveryStart) {
  LaunchConfig config = ValidConfig();
  config.checkpoint_dir = "/tmp/ckpt";
  const std::vector<std::string> argv = ServerArgv(config, 0, "/p");
  EXPECT_THAT(argv, testing::Contains("--checkpoint_dir=/tmp/ckpt"));
  EXPECT_THAT(argv, testing::Contains("--restore"));
  EXPECT_THAT(argv, testing::Not(testing::Contains("--extend")));
  // An extended run's servers take a finished run's checkpoints and the
  // workers' new plan, on every start (a restart may find only those).
  config.extend = true;
  EXPECT_THAT(ServerArgv(config, 0, "/p"), testing::Contains("--extend"));
}

TEST(LaunchConfigTest, RejectsUnknownLearningRateSchedule) {
  LaunchConfig config = ValidConfig();
  config.lr_schedule = "linear";
  EXPECT_THAT(std::string(ValidateLaunchConfig(config).message()),
              HasSubstr("--lr_schedule"));
}

TEST(LaunchConfigTest, ServerArgvUsesBasePortAndOmitsDefaultRate) {
  LaunchConfig config = ValidConfig();
  config.base_port = 5000;
  const std::vector<std::string> argv = ServerArgv(config, 3, "/p");
  EXPECT_THAT(argv, testing::Contains("--port=5003"));
  for (const std::string& arg : argv) {
    EXPECT_THAT(arg, testing::Not(HasSubstr("learning_rate")));
  }
}

TEST(LaunchConfigTest, WorkerArgvGivesSaveModelToRankZeroOnly) {
  LaunchConfig config = ValidConfig();
  config.save_model = "/tmp/model.bin";
  config.extra_worker_flags = {"--log_every=10"};
  const std::vector<std::string> servers = {"127.0.0.1:4000", "127.0.0.1:4001"};
  EXPECT_THAT(
      WorkerArgv(config, 0, servers),
      ElementsAre("/bin/worker", "--rank=0", "--local_rank=0",
                  "--num_workers=2", "--servers=127.0.0.1:4000,127.0.0.1:4001",
                  "--model=784-256-128-10", "--batch_size=64", "--epochs=10",
                  "--seed=1", "--data_dir=/usr/share/datasets/fashion-mnist",
                  "--device=auto", "--mode=sync", "--save_model=/tmp/model.bin",
                  "--log_every=10"));
  for (const std::string& arg : WorkerArgv(config, 1, servers)) {
    EXPECT_THAT(arg, testing::Not(HasSubstr("save_model")));
  }
  // On the second of two hosts, ranks 2 and 3 are local ranks 0 and 1 (they
  // pick that host's GPUs).
  config.first_rank = 2;
  config.host_workers = 2;
  EXPECT_THAT(WorkerArgv(config, 3, servers), testing::Contains("--local_rank=1"));
}

TEST(LaunchConfigTest, ClusterSpecBuildsTheSameCommands) {
  LaunchConfig config = ValidConfig();
  config.num_servers = 3;
  config.kill_grace = absl::Seconds(7);
  const ClusterSpec spec = MakeClusterSpec(config);
  EXPECT_EQ(spec.num_servers, 3);
  EXPECT_EQ(spec.kill_grace, absl::Seconds(7));
  EXPECT_EQ(spec.host, "127.0.0.1");
  EXPECT_EQ(spec.server_command(2, 0, "/p"), ServerArgv(config, 2, "/p"));
  EXPECT_EQ(spec.server_command(2, 7001, "/p"),
            ServerArgv(config, 2, "/p", 7001));
  EXPECT_EQ(spec.worker_command(1, {"a:1"}), WorkerArgv(config, 1, {"a:1"}));
}

TEST(LaunchConfigTest, AProgramRunsAsIsWithTheWorkerEnvironment) {
  LaunchConfig config = ValidConfig();
  config.worker_binary = "";
  config.program = {"python3", "train.py", "--lr=1"};
  ASSERT_TRUE(ValidateLaunchConfig(config).ok());
  const std::vector<std::string> servers = {"127.0.0.1:4000", "127.0.0.1:4001"};
  const ClusterSpec spec = MakeClusterSpec(config);
  EXPECT_EQ(spec.worker_command(1, servers), config.program);
  EXPECT_TRUE(spec.stop_servers_after_workers);
  ASSERT_TRUE(spec.worker_environment);
  const auto env = spec.worker_environment(1, servers);
  EXPECT_THAT(env, testing::Contains(std::pair<std::string, std::string>(
                       "PS_SERVERS", "127.0.0.1:4000,127.0.0.1:4001")));
  EXPECT_THAT(env, testing::Contains(
                       std::pair<std::string, std::string>("PS_RANK", "1")));
  EXPECT_THAT(env, testing::Contains(
                       std::pair<std::string, std::string>("WORLD_SIZE", "2")));
}

TEST(LaunchConfigTest, TheJobIdReachesServersAndWorkers) {
  LaunchConfig config = ValidConfig();
  config.job_id = "run-7";
  EXPECT_THAT(ServerArgv(config, 0, "/p"), testing::Contains("--job_id=run-7"));
  EXPECT_THAT(WorkerArgv(config, 1, {"a:1"}),
              testing::Contains("--job_id=run-7"));
  EXPECT_THAT(WorkerEnv(config, 1, {"a:1"}),
              testing::Contains(
                  std::pair<std::string, std::string>("PS_JOB_ID", "run-7")));
  config.job_id = "run 7";
  EXPECT_THAT(std::string(ValidateLaunchConfig(config).message()),
              HasSubstr("--job_id: job id \"run 7\" may hold only"));
}

AuthFiles MutualTlsFiles() {
  AuthFiles files;
  files.ca_cert = "/a/ca.crt";
  files.server_cert = "/a/server.crt";
  files.server_key = "/a/server.key";
  files.client_cert = "/a/client.crt";
  files.client_key = "/a/client.key";
  files.token = "/a/token";
  return files;
}

TEST(LaunchConfigTest, MutualTlsFilesReachServersWorkersAndPrograms) {
  LaunchConfig config = ValidConfig();
  config.auth = MutualTlsFiles();
  const std::vector<std::string> server = ServerArgv(config, 0, "/p");
  for (const char* flag :
       {"--tls_cert=/a/server.crt", "--tls_key=/a/server.key",
        "--tls_client_ca=/a/ca.crt", "--token_file=/a/token"}) {
    EXPECT_THAT(server, testing::Contains(flag));
  }
  const std::vector<std::string> worker = WorkerArgv(config, 1, {"a:1"});
  for (const char* flag :
       {"--tls_ca=/a/ca.crt", "--tls_cert=/a/client.crt",
        "--tls_key=/a/client.key", "--token_file=/a/token"}) {
    EXPECT_THAT(worker, testing::Contains(flag));
  }
  using Variable = std::pair<std::string, std::string>;
  const auto env = WorkerEnv(config, 1, {"a:1"});
  EXPECT_THAT(env, testing::Contains(Variable("PS_TLS_CA", "/a/ca.crt")));
  EXPECT_THAT(env, testing::Contains(Variable("PS_TLS_CERT", "/a/client.crt")));
  EXPECT_THAT(env, testing::Contains(Variable("PS_TLS_KEY", "/a/client.key")));
  EXPECT_THAT(env, testing::Contains(Variable("PS_TOKEN_FILE", "/a/token")));
}

TEST(LaunchConfigTest, AProgramsWorkersGetTheirThreadCount) {
  using Variable = std::pair<std::string, std::string>;
  LaunchConfig config = ValidConfig();
  config.program_threads = 3;
  // Our worker sets its own (one BLAS thread).
  EXPECT_THAT(WorkerEnv(config, 0, {"a:1"}),
              testing::Not(testing::Contains(
                  testing::Field(&Variable::first, "OMP_NUM_THREADS"))));
  config.program = {"/usr/bin/python3", "train.py"};
  EXPECT_THAT(WorkerEnv(config, 0, {"a:1"}),
              testing::Contains(Variable("OMP_NUM_THREADS", "3")));
  config.program_threads = 0;  // The launcher's environment had it.
  EXPECT_THAT(WorkerEnv(config, 0, {"a:1"}),
              testing::Not(testing::Contains(
                  testing::Field(&Variable::first, "OMP_NUM_THREADS"))));
}

TEST(LaunchConfigTest, AProgramsWorkersGetTheirMetricsPort) {
  using Variable = std::pair<std::string, std::string>;
  LaunchConfig config = ValidConfig();
  config.program = {"/usr/bin/python3", "train.py"};
  EXPECT_THAT(WorkerEnv(config, 1, {"a:1"}),
              testing::Not(testing::Contains(
                  testing::Field(&Variable::first, "PS_METRICS_PORT"))));
  config.metrics_port_base = 9100;
  EXPECT_THAT(WorkerEnv(config, 1, {"a:1"}),
              testing::Contains(Variable("PS_METRICS_PORT", "9103")));
}

TEST(LaunchConfigTest, TlsWithoutClientCertificates) {
  LaunchConfig config = ValidConfig();
  config.auth = MutualTlsFiles();
  config.auth.client_cert.clear();
  config.auth.client_key.clear();
  EXPECT_THAT(ServerArgv(config, 0, "/p"),
              testing::Not(testing::Contains(HasSubstr("--tls_client_ca"))));
  EXPECT_THAT(WorkerArgv(config, 0, {"a:1"}),
              testing::Not(testing::Contains(HasSubstr("--tls_cert"))));
}

TEST(LaunchConfigTest, PlaintextSetsNoAuthenticationFlag) {
  const LaunchConfig config = ValidConfig();
  EXPECT_THAT(ServerArgv(config, 0, "/p"),
              testing::Not(testing::Contains(HasSubstr("tls"))));
  EXPECT_THAT(WorkerArgv(config, 0, {"a:1"}),
              testing::Not(testing::Contains(HasSubstr("token"))));
}

TEST(LaunchConfigTest, OurWorkerGetsFlagsAndNoEnvironment) {
  const ClusterSpec spec = MakeClusterSpec(ValidConfig());
  EXPECT_FALSE(spec.worker_environment);
  EXPECT_FALSE(spec.stop_servers_after_workers);
}

TEST(LaunchConfigTest, RejectsAMissingWorker) {
  LaunchConfig config = ValidConfig();
  config.worker_binary = "";
  EXPECT_THAT(std::string(ValidateLaunchConfig(config).message()),
              HasSubstr("--worker_binary must not be empty"));
  config.program = {""};
  EXPECT_THAT(std::string(ValidateLaunchConfig(config).message()),
              HasSubstr("the program after -- has no name"));
}

TEST(ExtraFlagsTest, SplitsFlagsOnWhitespace) {
  absl::StatusOr<std::vector<std::string>> flags = ParseExtraFlags(
      "server_flags", "  --momentum=0.5\t--weight_decay=1e-4 --verbose ",
      ReservedServerFlags());
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_THAT(*flags, ElementsAre("--momentum=0.5", "--weight_decay=1e-4",
                                  "--verbose"));
  EXPECT_TRUE(
      ParseExtraFlags("worker_flags", "", ReservedWorkerFlags())->empty());
}

TEST(ExtraFlagsTest, RejectsNonFlagsAndFlagsTheLauncherSets) {
  for (const char* bad : {"momentum=0.5", "-m", "--", "--=3", "---x"}) {
    absl::StatusOr<std::vector<std::string>> flags =
        ParseExtraFlags("server_flags", bad, ReservedServerFlags());
    EXPECT_TRUE(absl::IsInvalidArgument(flags.status())) << bad;
    EXPECT_THAT(flags.status().message(), HasSubstr("--server_flags")) << bad;
  }
  absl::StatusOr<std::vector<std::string>> flags =
      ParseExtraFlags("server_flags", "--port=5", ReservedServerFlags());
  EXPECT_EQ(flags.status().message(),
            "--server_flags must not set --port: the launcher sets it (see "
            "its --help)");
  EXPECT_FALSE(
      ParseExtraFlags("worker_flags", "--servers", ReservedWorkerFlags()).ok());
}

TEST(ExtraFlagsTest, AuthenticationFlagsAreTheLaunchersUnderAuth) {
  EXPECT_TRUE(
      ParseExtraFlags("server_flags", "--tls_cert=/c", ReservedServerFlags())
          .ok());
  EXPECT_FALSE(ParseExtraFlags("server_flags", "--tls_cert=/c",
                               ReservedServerFlags(/*auth=*/true))
                   .ok());
  EXPECT_FALSE(ParseExtraFlags("worker_flags", "--token_file=/t",
                               ReservedWorkerFlags(/*auth=*/true))
                   .ok());
}

}  // namespace
}  // namespace ps

namespace ps {
namespace {

TEST(LaunchConfigTest, WorkerFlagsAndMetricsPortsAreForwarded) {
  LaunchConfig config = ValidConfig();
  config.log_every = 10;
  config.max_steps = 50;
  config.retry_timeout = absl::Seconds(30);
  config.metrics_port_base = 9100;
  const std::vector<std::string> worker = WorkerArgv(config, 1, {"h:1"});
  EXPECT_THAT(worker, ::testing::IsSupersetOf(
                          {"--log_every=10", "--max_steps=50",
                           "--retry_timeout=30s", "--metrics_port=9103"}));
  EXPECT_THAT(worker, ::testing::Not(::testing::Contains(
                          ::testing::HasSubstr("--eval_every"))));
  EXPECT_THAT(ServerArgv(config, 1, "/p"),
              ::testing::Contains("--metrics_port=9101"));
  EXPECT_EQ(MetricsPortsLine(config),
            "metrics at http://127.0.0.1:PORT/metrics: servers on 9100-9101, "
            "workers on 9102-9103");
  config.metrics_port_base = 0;
  EXPECT_THAT(ServerArgv(config, 1, "/p"),
              ::testing::Not(
                  ::testing::Contains(::testing::HasSubstr("--metrics_port"))));
}

TEST(LaunchConfigTest, WarnsOfABatchLargerThanAWorkersShare) {
  LaunchConfig config = ValidConfig();
  config.num_workers = 4;
  config.batch_size = 20000;
  ASSERT_EQ(LaunchConfigWarnings(config).size(), 1u);
  EXPECT_THAT(LaunchConfigWarnings(config)[0],
              ::testing::HasSubstr("larger than a worker's share"));
  config.batch_size = 64;
  EXPECT_TRUE(LaunchConfigWarnings(config).empty());
}

}  // namespace
}  // namespace ps
