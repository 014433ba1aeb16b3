#include "worker/worker_config.h"

#include <functional>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ps::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

WorkerConfig Valid() {
  WorkerConfig config;
  config.num_workers = 2;
  config.servers = "127.0.0.1:1,127.0.0.1:2";
  return config;
}

TEST(WorkerConfigTest, DefaultsWithServersAreValid) {
  EXPECT_TRUE(CheckWorkerConfig(Valid(), 1).ok());
}

// A lookup of the variables `set` holds (std::getenv's stand-in).
std::function<const char*(const char*)> Environment(
    const std::map<std::string, std::string>& set) {
  return [set](const char* name) -> const char* {
    auto it = set.find(name);
    return it == set.end() ? nullptr : it->second.c_str();
  };
}

// What srun sets for task `rank` of `num_tasks` on one node.
std::map<std::string, std::string> SrunTask(int rank, int num_tasks) {
  return {{"SLURM_PROCID", std::to_string(rank)},
          {"SLURM_NTASKS", std::to_string(num_tasks)},
          {"SLURM_LOCALID", std::to_string(rank)},
          {"SLURM_NODEID", "0"},
          {"SLURM_NNODES", "1"},
          {"SLURM_STEP_NODELIST", "vm"},
          {"SLURM_STEP_TASKS_PER_NODE", std::to_string(num_tasks)},
          {"SLURM_JOB_ID", "7"}};
}

TEST(WorkerConfigTest, RankComesFromTheFlagOrTheJobsIndex) {
  WorkerConfig config = Valid();
  const auto index = Environment({{"JOB_COMPLETION_INDEX", "5"}});
  config.rank = 1;
  EXPECT_EQ(ResolveRank(config, true, index)->rank, 1);
  config.rank = -1;
  EXPECT_EQ(ResolveRank(config, true, index)->rank, 5);
  EXPECT_EQ(ResolveRank(config, true, index)->num_workers, 2);
  EXPECT_FALSE(ResolveRank(config, true, Environment({})).ok());
}

TEST(WorkerConfigTest, RankAndCountComeFromSrunOrMpirunWithRankMinusOne) {
  WorkerConfig config = Valid();
  config.rank = -1;
  config.num_workers = 1;  // The flag's default, not given.
  absl::StatusOr<RankAndCount> place =
      ResolveRank(config, false, Environment(SrunTask(2, 3)));
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->rank, 2);
  EXPECT_EQ(place->num_workers, 3);

  place = ResolveRank(config, false,
                      Environment({{"OMPI_COMM_WORLD_RANK", "1"},
                                   {"OMPI_COMM_WORLD_SIZE", "4"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->rank, 1);
  EXPECT_EQ(place->num_workers, 4);

  // --num_workers given: it must agree with the task count.
  config.num_workers = 3;
  EXPECT_EQ(ResolveRank(config, true, Environment(SrunTask(0, 3)))->rank, 0);

  // A rank given by its flag wins over the scheduler's.
  config.rank = 0;
  EXPECT_EQ(ResolveRank(config, true, Environment(SrunTask(2, 3)))->rank, 0);
}

TEST(WorkerConfigTest, LocalRankFromTheFlagTheSchedulerOrTheRank) {
  WorkerConfig config = Valid();
  config.rank = 1;
  EXPECT_EQ(ResolveRank(config, true, Environment({}))->local_rank, 1);
  config.local_rank = 0;
  EXPECT_EQ(ResolveRank(config, true, Environment({}))->local_rank, 0);

  config.rank = -1;
  config.local_rank = -1;
  config.num_workers = 4;
  absl::StatusOr<RankAndCount> place =
      ResolveRank(config, false,
                  Environment({{"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                               {"OMPI_COMM_WORLD_NODE_RANK", "1"}}));
  ASSERT_TRUE(place.ok()) << place.status();
  EXPECT_EQ(place->rank, 3);
  EXPECT_EQ(place->local_rank, 1);
  // One worker a pod: local rank 0 whatever the index.
  EXPECT_EQ(
      ResolveRank(config, true, Environment({{"JOB_COMPLETION_INDEX", "3"}}))
          ->local_rank,
      0);

  config.local_rank = -2;
  EXPECT_THAT(ResolveRank(config, true, Environment({})).status().message(),
              HasSubstr("--local_rank must be -1"));
}

TEST(WorkerConfigTest, ContradictoryOrHalfSetSchedulerVariablesAreErrors) {
  WorkerConfig config = Valid();
  config.rank = -1;
  config.num_workers = 2;
  EXPECT_THAT(
      ResolveRank(config, true, Environment(SrunTask(0, 3))).status().message(),
      HasSubstr("--num_workers=2 but Slurm started 3 tasks"));

  std::map<std::string, std::string> half = SrunTask(0, 2);
  half.erase("SLURM_NTASKS");
  EXPECT_THAT(ResolveRank(config, false, Environment(half)).status().message(),
              HasSubstr("$SLURM_NTASKS is not set"));

  std::map<std::string, std::string> both = SrunTask(0, 2);
  both["JOB_COMPLETION_INDEX"] = "0";
  EXPECT_THAT(ResolveRank(config, false, Environment(both)).status().message(),
              HasSubstr("both $JOB_COMPLETION_INDEX"));
}

TEST(WorkerConfigTest, ServersComeFromOneOfTwoFlags) {
  WorkerConfig config = Valid();
  absl::StatusOr<std::vector<std::string>> servers = ResolveServers(config);
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_THAT(*servers, ElementsAre("127.0.0.1:1", "127.0.0.1:2"));
  config.server_pattern = "ps-{index}:50051";
  EXPECT_THAT(ResolveServers(config).status().message(),
              HasSubstr("exactly one of --servers and --server_pattern"));
  config.servers = "";
  config.num_servers = 2;
  servers = ResolveServers(config);
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_EQ(servers->size(), 2u);
}

TEST(WorkerConfigTest, NamesTheFlagAtFault) {
  auto message = [](void (*change)(WorkerConfig*), int rank = 0) {
    WorkerConfig config = Valid();
    change(&config);
    return std::string(CheckWorkerConfig(config, rank).message());
  };
  EXPECT_THAT(message([](WorkerConfig* c) { c->num_workers = 0; }),
              HasSubstr("--num_workers must be at least 1"));
  EXPECT_THAT(message([](WorkerConfig*) {}, 2),
              HasSubstr("--rank must be in [0, 2), got 2"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->batch_size = 0; }),
              HasSubstr("--batch_size"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->chunk_kb = 0; }),
              HasSubstr("--chunk_kb"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->mode = "bsp"; }),
              HasSubstr("--mode"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->tls_cert = "c.pem"; }),
              HasSubstr("--tls_cert and --tls_key go together"));
  EXPECT_THAT(message([](WorkerConfig* c) { c->token_file = "t"; }),
              HasSubstr("need --tls_ca"));
  EXPECT_THAT(message([](WorkerConfig* c) {
                c->heartbeat_period = absl::ZeroDuration();
              }),
              HasSubstr("--heartbeat_period must be positive"));
}

TEST(WorkerConfigTest, AllreduceModeTakesItsOwnFlagsOnly) {
  WorkerConfig config = Valid();
  config.mode = kAllreduceMode;
  config.checkpoint_dir = "/tmp/ring";
  EXPECT_TRUE(CheckWorkerConfig(config, 1).ok());
  config.allreduce_bucket_kb = 0;
  EXPECT_THAT(CheckWorkerConfig(config, 1).message(),
              HasSubstr("--allreduce_bucket_kb"));
  config.allreduce_bucket_kb = 256;
  config.checkpoint_every_steps = -1;
  EXPECT_THAT(CheckWorkerConfig(config, 1).message(),
              HasSubstr("--checkpoint_every_steps"));
  config.checkpoint_every_steps = 200;
  config.local = true;
  EXPECT_THAT(CheckWorkerConfig(config, 1).message(), HasSubstr("--local"));
  // The servers checkpoint in their modes.
  config.local = false;
  config.mode = "sync";
  EXPECT_THAT(CheckWorkerConfig(config, 1).message(),
              HasSubstr("--checkpoint_dir"));
}

}  // namespace
}  // namespace ps::worker
