#include "common/worker_environment.h"

#include <map>
#include <string>
#include <vector>

#include "common/status_testing.h"
#include "gtest/gtest.h"

namespace ps {
namespace {

using ::ps::testing::ExpectInvalid;

// An environment in a map, as ReadWorkerEnvironment looks it up.
class FakeEnvironment {
 public:
  explicit FakeEnvironment(const WorkerEnvironment& environment) {
    for (const auto& [name, value] : WorkerEnvironmentVariables(environment)) {
      variables_[name] = value;
    }
  }
  void Set(const std::string& name, const std::string& value) {
    variables_[name] = value;
  }
  void Unset(const std::string& name) { variables_.erase(name); }

  absl::StatusOr<WorkerEnvironment> Read() const {
    return ReadWorkerEnvironment([this](const char* name) -> const char* {
      auto it = variables_.find(name);
      return it == variables_.end() ? nullptr : it->second.c_str();
    });
  }

 private:
  std::map<std::string, std::string> variables_;
};

WorkerEnvironment ThirdOfFour() {
  return {2, 4, 0, 1, {"127.0.0.1:7000", "127.0.0.1:7001"}, "run-7"};
}

TEST(WorkerEnvironmentTest, SetsOursAndTorchrunsVariables) {
  const auto variables = WorkerEnvironmentVariables(ThirdOfFour());
  const std::map<std::string, std::string> got(variables.begin(),
                                               variables.end());
  EXPECT_EQ(got.at("PS_RANK"), "2");
  EXPECT_EQ(got.at("PS_NUM_WORKERS"), "4");
  EXPECT_EQ(got.at("PS_NUM_SERVERS"), "2");
  EXPECT_EQ(got.at("PS_SERVERS"), "127.0.0.1:7000,127.0.0.1:7001");
  EXPECT_EQ(got.at("RANK"), "2");
  EXPECT_EQ(got.at("WORLD_SIZE"), "4");
  EXPECT_EQ(got.at("LOCAL_RANK"), "0");
  EXPECT_EQ(got.at("LOCAL_WORLD_SIZE"), "1");
}

TEST(WorkerEnvironmentTest, ReadsBackWhatItSets) {
  absl::StatusOr<WorkerEnvironment> read =
      FakeEnvironment(ThirdOfFour()).Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->rank, 2);
  EXPECT_EQ(read->num_workers, 4);
  EXPECT_EQ(read->local_rank, 0);
  EXPECT_EQ(read->local_num_workers, 1);
  EXPECT_EQ(read->servers, ThirdOfFour().servers);
  EXPECT_EQ(read->job_id, "run-7");
}

TEST(WorkerEnvironmentTest, AJobIdIsOptional) {
  FakeEnvironment env(ThirdOfFour());
  env.Unset("PS_JOB_ID");
  absl::StatusOr<WorkerEnvironment> read = env.Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->job_id, "");
}

TEST(WorkerEnvironmentTest, CarriesTheAuthenticationFilesPaths) {
  WorkerEnvironment environment = ThirdOfFour();
  environment.tls_ca_file = "/auth/ca.crt";
  environment.tls_cert_file = "/auth/client.crt";
  environment.tls_key_file = "/auth/client.key";
  environment.tls_server_name = "ps-server";
  environment.token_file = "/auth/token";
  absl::StatusOr<WorkerEnvironment> read = FakeEnvironment(environment).Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->tls_ca_file, "/auth/ca.crt");
  EXPECT_EQ(read->tls_cert_file, "/auth/client.crt");
  EXPECT_EQ(read->tls_key_file, "/auth/client.key");
  EXPECT_EQ(read->tls_server_name, "ps-server");
  EXPECT_EQ(read->token_file, "/auth/token");
}

TEST(WorkerEnvironmentTest, ReadsTheAuthenticationVariablesAlone) {
  // Without PS_SERVERS or PS_RANK: a program that names the servers itself.
  const std::map<std::string, std::string> variables = {
      {"PS_TLS_CA", "/auth/ca.crt"}, {"PS_TOKEN_FILE", "/auth/token"}};
  WorkerEnvironment read;
  read.tls_server_name = "kept";
  ReadAuthEnvironment(
      [&variables](const char* name) -> const char* {
        auto it = variables.find(name);
        return it == variables.end() ? nullptr : it->second.c_str();
      },
      &read);
  EXPECT_EQ(read.tls_ca_file, "/auth/ca.crt");
  EXPECT_EQ(read.token_file, "/auth/token");
  EXPECT_EQ(read.tls_cert_file, "");
  EXPECT_EQ(read.tls_server_name, "kept");  // Unset: left as it was.
}

TEST(WorkerEnvironmentTest, SetsEmptyAuthenticationVariablesWhenPlaintext) {
  const auto variables = WorkerEnvironmentVariables(ThirdOfFour());
  const std::map<std::string, std::string> got(variables.begin(),
                                               variables.end());
  // Set, so that a child does not inherit the launcher's.
  EXPECT_EQ(got.at("PS_TLS_CA"), "");
  EXPECT_EQ(got.at("PS_TOKEN_FILE"), "");
}

TEST(WorkerEnvironmentTest, NamesEveryMissingVariableAtOnce) {
  FakeEnvironment env(ThirdOfFour());
  env.Unset("PS_LOCAL_NUM_WORKERS");
  env.Unset("PS_LOCAL_RANK");
  env.Unset("PS_NUM_SERVERS");
  ExpectInvalid(env.Read().status(),
                "$PS_LOCAL_NUM_WORKERS, $PS_LOCAL_RANK, $PS_NUM_SERVERS are "
                "not set: start worker programs with `launch -- PROGRAM`, or "
                "under `srun` or `mpirun`");
}

// Rank 5 of 8 under srun, 3 tasks on this node; servers named by PS_.
FakeEnvironment SlurmTaskWithServers() {
  FakeEnvironment env(ThirdOfFour());
  for (const char* name : {"PS_RANK", "PS_NUM_WORKERS", "PS_LOCAL_RANK",
                           "PS_LOCAL_NUM_WORKERS", "PS_JOB_ID"}) {
    env.Unset(name);
  }
  env.Set("SLURM_PROCID", "5");
  env.Set("SLURM_NTASKS", "8");
  env.Set("SLURM_LOCALID", "2");
  env.Set("SLURM_NODEID", "1");
  env.Set("SLURM_NNODES", "3");
  env.Set("SLURM_STEP_NODELIST", "node[01-02],gpu7");
  env.Set("SLURM_STEP_TASKS_PER_NODE", "3(x2),2");
  env.Set("SLURM_JOB_ID", "4242");
  return env;
}

TEST(WorkerEnvironmentTest, TakesTheRanksFromSlurmWithoutPsRanks) {
  absl::StatusOr<WorkerEnvironment> read = SlurmTaskWithServers().Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->rank, 5);
  EXPECT_EQ(read->num_workers, 8);
  EXPECT_EQ(read->local_rank, 2);
  EXPECT_EQ(read->local_num_workers, 3);
  EXPECT_EQ(read->servers.size(), 2u);
  // The servers know their job by --job_id, which only PS_JOB_ID tells.
  EXPECT_EQ(read->job_id, "");
}

TEST(WorkerEnvironmentTest, TakesTheRanksFromOpenMpiWithoutPsRanks) {
  FakeEnvironment env = SlurmTaskWithServers();
  env.Set("OMPI_COMM_WORLD_RANK", "3");
  env.Set("OMPI_COMM_WORLD_SIZE", "4");
  env.Set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.Set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  env.Set("PS_JOB_ID", "run-7");
  absl::StatusOr<WorkerEnvironment> read = env.Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->rank, 3);
  EXPECT_EQ(read->num_workers, 4);
  EXPECT_EQ(read->local_rank, 1);
  EXPECT_EQ(read->local_num_workers, 2);
  EXPECT_EQ(read->job_id, "run-7");
}

TEST(WorkerEnvironmentTest, PsRanksWinOverTheSchedulers) {
  FakeEnvironment env = SlurmTaskWithServers();
  for (const auto& [name, value] : WorkerEnvironmentVariables(ThirdOfFour())) {
    env.Set(name, value);
  }
  absl::StatusOr<WorkerEnvironment> read = env.Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->rank, 2);
  EXPECT_EQ(read->num_workers, 4);
}

TEST(WorkerEnvironmentTest, HalfSetPsRanksAreNotCompletedFromTheScheduler) {
  FakeEnvironment env = SlurmTaskWithServers();
  env.Set("PS_RANK", "1");
  ExpectInvalid(env.Read().status(),
                "$PS_NUM_WORKERS, $PS_LOCAL_NUM_WORKERS, $PS_LOCAL_RANK are "
                "not set");
}

TEST(WorkerEnvironmentTest, AHalfSetSchedulerEnvironmentIsItsError) {
  FakeEnvironment env = SlurmTaskWithServers();
  env.Unset("SLURM_NTASKS");
  ExpectInvalid(env.Read().status(), "$SLURM_NTASKS");
}

TEST(WorkerEnvironmentTest, NamesAMissingVariable) {
  for (const char* name :
       {"PS_RANK", "PS_NUM_WORKERS", "PS_LOCAL_RANK", "PS_LOCAL_NUM_WORKERS",
        "PS_NUM_SERVERS", "PS_SERVERS"}) {
    FakeEnvironment env(ThirdOfFour());
    env.Unset(name);
    ExpectInvalid(env.Read().status(), std::string("$") + name + " is not set");
  }
}

TEST(WorkerEnvironmentTest, RefusesMalformedOrInconsistentValues) {
  struct Case {
    const char* name;
    const char* value;
    const char* error;
  };
  for (const Case& c : {
           Case{"PS_RANK", "4", "$PS_RANK must be a number in [0, 3]"},
           Case{"PS_RANK", "-1", "$PS_RANK must be a number in [0, 3]"},
           Case{"PS_RANK", "two", "got 'two'"},
           Case{"PS_NUM_WORKERS", "0", "$PS_NUM_WORKERS must be a number"},
           Case{"PS_NUM_WORKERS", "99999999999", "$PS_NUM_WORKERS must be"},
           Case{"PS_LOCAL_RANK", "1",
                "$PS_LOCAL_RANK must be a number in [0, 0]"},
           Case{"PS_LOCAL_NUM_WORKERS", "5", "in [1, 4]"},
           Case{"PS_NUM_SERVERS", "3",
                "lists 2 servers but $PS_NUM_SERVERS is 3"},
           Case{"PS_SERVERS", "127.0.0.1:7000,nope", "$PS_SERVERS: "},
           Case{"PS_SERVERS", "", "$PS_SERVERS: "},
           Case{"PS_JOB_ID", "a b", "$PS_JOB_ID: job id"},
       }) {
    SCOPED_TRACE(std::string(c.name) + "=" + c.value);
    FakeEnvironment env(ThirdOfFour());
    env.Set(c.name, c.value);
    ExpectInvalid(env.Read().status(), c.error);
  }
}

TEST(WorkerEnvironmentTest, ExpandsAServerPatternInsteadOfAList) {
  FakeEnvironment env(ThirdOfFour());
  env.Unset("PS_SERVERS");
  env.Set("PS_NUM_SERVERS", "3");
  env.Set("PS_SERVER_PATTERN", "run-a-ps-server-{index}.run-a-ps-server:7000");
  absl::StatusOr<WorkerEnvironment> read = env.Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->servers, (std::vector<std::string>{
                               "run-a-ps-server-0.run-a-ps-server:7000",
                               "run-a-ps-server-1.run-a-ps-server:7000",
                               "run-a-ps-server-2.run-a-ps-server:7000"}));
}

TEST(WorkerEnvironmentTest, RefusesAServerListAndAPatternTogether) {
  FakeEnvironment env(ThirdOfFour());
  env.Set("PS_SERVER_PATTERN", "s-{index}:7000");
  ExpectInvalid(env.Read().status(),
                "both $PS_SERVERS and $PS_SERVER_PATTERN are set");
}

TEST(WorkerEnvironmentTest, RefusesAPatternWithoutIndex) {
  FakeEnvironment env(ThirdOfFour());
  env.Unset("PS_SERVERS");
  env.Set("PS_SERVER_PATTERN", "s:7000");
  ExpectInvalid(env.Read().status(), "$PS_SERVER_PATTERN: ");
}

}  // namespace
}  // namespace ps
